package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// CopyMain is the baseline copy process of the partitions benchmark: the plainest mirror there
// is, a franz-go consumer of every partition of a source topic (no group, from the start, its
// default fetch sizes) handing each record to a franz-go producer (acks=all, idempotent, its
// default linger and batching) that writes it to the same partition of a destination topic.
// It keeps the records' keys, values, headers and timestamps, nothing else (offsets, batches
// and transaction markers are the destination's own), and runs until SIGINT or SIGTERM. Both
// clients ask for metadata again after 100 ms rather than 5 s, as the benchmark's other clients
// do: its topics are created just before they are used.
//
//	copy --source HOST:PORT[,...] --dest HOST:PORT[,...] --topic T [--to T]
func CopyMain(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	source := fs.String("source", "", "source brokers, host:port[,...]")
	dest := fs.String("dest", "", "destination brokers, host:port[,...]")
	topic := fs.String("topic", "", "source topic")
	to := fs.String("to", "", "destination topic (default: the source topic's name); it must exist with as many partitions")
	logLevel := fs.String("log-level", "", "franz-go's log to stderr: error, warn, info or debug (default: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *source == "" || *dest == "" || *topic == "" {
		return errors.New("copy: --source, --dest and --topic are required")
	}
	if *to == "" {
		*to = *topic
	}
	var logOpts []kgo.Opt
	if *logLevel != "" {
		lvl, ok := map[string]kgo.LogLevel{"error": kgo.LogLevelError, "warn": kgo.LogLevelWarn, "info": kgo.LogLevelInfo, "debug": kgo.LogLevelDebug}[*logLevel]
		if !ok {
			return fmt.Errorf("copy: --log-level %q: error, warn, info or debug", *logLevel)
		}
		logOpts = append(logOpts, kgo.WithLogger(kgo.BasicLogger(stderr, lvl, nil)))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cons, err := kgo.NewClient(append(logOpts, kgo.SeedBrokers(strings.Split(*source, ",")...), kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(100*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(append(logOpts, kgo.SeedBrokers(strings.Split(*dest, ",")...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MetadataMinAge(100*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer prod.Close()
	var (
		mu     sync.Mutex
		failed error
	)
	done := func(_ *kgo.Record, err error) {
		if err != nil && ctx.Err() == nil {
			mu.Lock()
			if failed == nil {
				failed = err
			}
			mu.Unlock()
		}
	}
	for {
		fetches := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			fmt.Fprintf(stderr, "copy: fetching %s[%d]: %v\n", t, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			prod.Produce(ctx, &kgo.Record{Topic: *to, Partition: r.Partition, Key: r.Key, Value: r.Value,
				Headers: r.Headers, Timestamp: r.Timestamp}, done)
		})
		mu.Lock()
		err := failed
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("copy: producing to %s: %w", *to, err)
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = prod.Flush(fctx)
	return nil
}
