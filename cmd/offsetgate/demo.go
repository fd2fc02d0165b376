package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runDemo starts an embedded source and destination cluster (kfake, in process), seeds the
// source with a topic and some records, and prints how to connect. It runs until interrupted
// or until --duration passes.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	records := fs.Int("records", 1000, "records to write to the source's demo topic")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}

	src, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(3, "demo-orders"))
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate demo: starting the embedded source cluster:", err)
		return 1
	}
	defer src.Close()
	dst, err := kfake.NewCluster(kfake.NumBrokers(2))
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate demo: starting the embedded destination cluster:", err)
		return 1
	}
	defer dst.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(src.ListenAddrs()...), kgo.DefaultProduceTopic("demo-orders"))
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate demo:", err)
		return 1
	}
	defer cl.Close()
	rs := make([]*kgo.Record, 0, *records)
	for i := 0; i < *records; i++ {
		rs = append(rs, &kgo.Record{Key: []byte("order-" + strconv.Itoa(i%50)), Value: []byte(fmt.Sprintf(`{"order":%d}`, i))})
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = cl.ProduceSync(pctx, rs...).FirstErr()
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate demo: seeding the source:", err)
		return 1
	}

	fmt.Fprintf(stdout, "source cluster (embedded):      %v  topic demo-orders, 3 partitions, %d records\n", src.ListenAddrs(), *records)
	fmt.Fprintf(stdout, "destination cluster (embedded): %v\n", dst.ListenAddrs())
	fmt.Fprintf(stdout, "try: kcat -C -b %s -t demo-orders -e\n", src.ListenAddrs()[0])
	fmt.Fprintln(stdout, "press Ctrl-C to stop")
	<-ctx.Done()
	fmt.Fprintln(stdout, "demo stopped")
	return 0
}
