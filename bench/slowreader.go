package bench

// The slow-reader attack: one client pipelines Fetches of a topic holding several MiB, each
// allowed to answer all of it, and reads none of the answers for a while. offsetgate's
// resident memory is sampled from /proc/<pid>/status while the client does not read; then the
// client reads every answer, in order. Several offsetgate binaries (this build and an earlier
// one, say) are measured in one run, on both transports.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/internal/testkafka"
)

// SlowReaderConfig is one slow-reader run.
type SlowReaderConfig struct {
	Dest       *testkafka.Cluster
	Binaries   []Binary // measured in turn
	Transports []string // gnet, goroutine
	Requests   int      // Fetches pipelined
	TopicBytes int      // record payload in the topic; every Fetch may answer all of it
	Hold       time.Duration
	LogDir     string
	Progress   io.Writer
}

// Binary is an offsetgate binary and its name in the report.
type Binary struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// SlowReaderRun is one binary on one transport.
type SlowReaderRun struct {
	Binary    string `json:"binary"`
	Commit    string `json:"commit,omitempty"`
	Transport string `json:"transport"`
	// RSS before the attack, its peak while the client did not read (sampled every 100 ms,
	// and the kernel's high-water mark VmHWM), and after the client read everything (with
	// VmHWM then: the peak of the whole run, reading back included).
	RSSBeforeKiB    int64 `json:"rss_before_kib"`
	RSSPeakKiB      int64 `json:"rss_peak_kib"`
	HWMKiB          int64 `json:"vm_hwm_kib"`
	RSSAfterReadKiB int64 `json:"rss_after_read_kib"`
	HWMEndKiB       int64 `json:"vm_hwm_end_kib"`
	// HeldHighWater is offsetgate_held_bytes_high_water (-1: the binary has no budget).
	HeldHighWater float64 `json:"held_high_water_bytes"`
	Answers       int     `json:"answers"`
	AnswerBytes   int64   `json:"answer_bytes"`
	ReadSeconds   float64 `json:"read_seconds"`
	Error         string  `json:"error,omitempty"`
}

// SlowReaderReport is what the JSON file of a slow-reader run holds.
type SlowReaderReport struct {
	Tool     string    `json:"tool"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	Settings struct {
		Requests     int     `json:"requests"`
		TopicBytes   int     `json:"topic_bytes"`
		FetchBytes   int     `json:"fetch_max_bytes"`
		HoldSeconds  float64 `json:"hold_seconds"`
		ClientRcvBuf int     `json:"client_socket_receive_buffer"`
	} `json:"settings"`
	Runs []SlowReaderRun `json:"runs"`
}

// slowReaderRcvBuf is the attacking client's socket receive buffer: small, so that the kernel
// takes little of what the client does not read.
const slowReaderRcvBuf = 16 << 10

// RunSlowReader runs the attack against every binary on every transport.
func RunSlowReader(ctx context.Context, cfg SlowReaderConfig) (*SlowReaderReport, error) {
	logf := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}
	cleanup, err := tempLogDir(&cfg.LogDir, "ogbench-slowreader-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep := &SlowReaderReport{Tool: "ogbench slowreader", Started: time.Now(), Machine: machineInfo()}
	rep.Settings.Requests, rep.Settings.TopicBytes, rep.Settings.FetchBytes = cfg.Requests, cfg.TopicBytes, 2*cfg.TopicBytes
	rep.Settings.HoldSeconds, rep.Settings.ClientRcvBuf = cfg.Hold.Seconds(), slowReaderRcvBuf

	topic := fmt.Sprintf("ogbench-slowreader-%d", time.Now().UnixNano())
	if err := cfg.Dest.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		return rep, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Dest.Addrs()...), kgo.ProducerBatchMaxBytes(1<<20),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return rep, err
	}
	var rs []*kgo.Record
	for n := 0; n < cfg.TopicBytes; n += 8 << 10 {
		v := make([]byte, 8<<10)
		_, _ = rand.Read(v) // incompressible
		rs = append(rs, &kgo.Record{Value: v})
	}
	err = cl.ProduceSync(ctx, rs...).FirstErr()
	cl.Close()
	if err != nil {
		return rep, err
	}
	var leader int32
	for {
		if leader, _, err = cfg.Dest.Leader(ctx, topic, 0); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return rep, err
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, tr := range cfg.Transports {
		for _, b := range cfg.Binaries {
			logf("slowreader: %s on %s: %d Fetches of up to %d MiB each, not read for %v", b.Name, tr, cfg.Requests, 2*cfg.TopicBytes>>20, cfg.Hold)
			run, err := slowReaderOnce(ctx, cfg, b, tr, topic, leader)
			if err != nil {
				run.Error = err.Error()
				logf("slowreader: %s on %s: %v", b.Name, tr, err)
			}
			rep.Runs = append(rep.Runs, run)
			logf("slowreader: %s on %s: RSS %d MiB before, peak %d MiB (VmHWM %d MiB) not reading, %d MiB after reading %d answers in %.1f s (VmHWM %d MiB)",
				b.Name, tr, run.RSSBeforeKiB>>10, run.RSSPeakKiB>>10, run.HWMKiB>>10, run.RSSAfterReadKiB>>10, run.Answers, run.ReadSeconds, run.HWMEndKiB>>10)
			if ctx.Err() != nil {
				rep.Finished = time.Now()
				return rep, ctx.Err()
			}
		}
	}
	rep.Finished = time.Now()
	for _, r := range rep.Runs {
		if r.Error != "" {
			return rep, fmt.Errorf("%s on %s: %s", r.Binary, r.Transport, r.Error)
		}
	}
	return rep, nil
}

func slowReaderOnce(ctx context.Context, cfg SlowReaderConfig, b Binary, transport, topic string, leader int32) (SlowReaderRun, error) {
	run := SlowReaderRun{Binary: b.Name, Commit: binaryCommit(b.Path), Transport: transport, HeldHighWater: -1}
	og, err := startOffsetgateArgs(ctx, b.Path, cfg.Dest, cfg.LogDir, "offsetgate-slowreader-"+b.Name+"-"+transport, "--transport", transport)
	if err != nil {
		return run, err
	}
	defer og.stop()
	pid := og.pid()
	// One round trip first, so that the code a connection takes is loaded.
	if c, err := apiVersionsConn(og.listen, 0); err == nil {
		c.Close()
	} else {
		return run, err
	}
	time.Sleep(time.Second)
	if run.RSSBeforeKiB, err = procStatusKiB(pid, "VmRSS"); err != nil {
		return run, err
	}

	d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, slowReaderRcvBuf)
		})
	}}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(og.brokerPort(leader))))
	if err != nil {
		return run, err
	}
	defer c.Close()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MaxWaitMillis, req.MaxBytes, req.ReplicaID = 100, int32(2*cfg.TopicBytes), -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = int32(2*cfg.TopicBytes), -1
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("ogbench-slowreader"))
	var frames []byte
	for i := 1; i <= cfg.Requests; i++ {
		// AppendRequest writes the frame's size at the start of what it is given.
		frames = append(frames, f.AppendRequest(nil, req, int32(i))...)
	}
	if _, err := c.Write(frames); err != nil {
		return run, err
	}
	for end := time.Now().Add(cfg.Hold); time.Now().Before(end); {
		if v, err := procStatusKiB(pid, "VmRSS"); err == nil {
			run.RSSPeakKiB = max(run.RSSPeakKiB, v)
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	run.HWMKiB, _ = procStatusKiB(pid, "VmHWM")
	if v, err := og.metric("offsetgate_held_bytes_high_water"); err == nil {
		run.HeldHighWater = v
	}

	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Minute))
	var hdr [8]byte
	for i := 1; i <= cfg.Requests; i++ {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return run, fmt.Errorf("answer %d: %w", i, err)
		}
		size, corr := int64(binary.BigEndian.Uint32(hdr[:4])), int32(binary.BigEndian.Uint32(hdr[4:]))
		if corr != int32(i) {
			return run, fmt.Errorf("answer %d has correlation id %d", i, corr)
		}
		if _, err := io.CopyN(io.Discard, c, size-4); err != nil {
			return run, fmt.Errorf("answer %d: %w", i, err)
		}
		run.Answers++
		run.AnswerBytes += 4 + size
	}
	run.ReadSeconds = time.Since(start).Seconds()
	if run.AnswerBytes < int64(cfg.Requests)*int64(cfg.TopicBytes) {
		return run, fmt.Errorf("%d bytes of answers, want at least %d", run.AnswerBytes, int64(cfg.Requests)*int64(cfg.TopicBytes))
	}
	time.Sleep(time.Second)
	run.RSSAfterReadKiB, _ = procStatusKiB(pid, "VmRSS")
	run.HWMEndKiB, _ = procStatusKiB(pid, "VmHWM")
	return run, nil
}
