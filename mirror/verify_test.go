package mirror_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"offsetgate/batch"
	"offsetgate/internal/relay"
	"offsetgate/internal/testkafka"
	"offsetgate/mirror"
	"offsetgate/verify"
)

// The prover must be able to fail: with the loopback relay between it and offsetgate
// corrupting one record byte, one leader epoch (outside the CRC) or one timestamp (with the CRC
// recomputed) in one batch, each is caught at that batch, at both levels; an empty range is an
// error.
func TestVerifyCatchesCorruption(t *testing.T) {
	prefix := testkafka.Names(t, "vc")
	e := newEnv(t, prefix, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := e.pair.Source
	topic := prefix + "-t"
	if err := s.CreateTopic(ctx, topic, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	produceSource(ctx, t, s, topic, 300)
	if _, err := mirror.Once(ctx, e.mirrorConfig(topic)); err != nil {
		t.Fatal(err)
	}
	scl, err := kgo.NewClient(kgo.SeedBrokers(s.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	// The second batch of the source: the one the relay corrupts on its way from offsetgate.
	bs, err := mirror.FetchRaw(ctx, scl, topic, 0, 0, 1<<20)
	if err != nil || len(bs) < 3 {
		t.Fatalf("source batches: %d, %v", len(bs), err)
	}
	target := bs[1]
	th, _ := batch.ReadHeader(target)
	px := e.plain(t)

	var hits atomic.Int64
	run := func(level verify.Level, corrupt func(b []byte)) verify.Result {
		t.Helper()
		set := relay.NewSet(false, func(_ int, dir relay.Direction, frame []byte) relay.Action {
			if dir != relay.ToClient || corrupt == nil {
				return relay.Pass
			}
			// Find the batch by its header fields inside the CRC (which the corruptions below
			// leave alone until they change it).
			if i := bytes.Index(frame, target[17:batch.HeaderLen]); i >= 17 {
				corrupt(frame[i-17 : i-17+len(target)])
				hits.Add(1)
			}
			return relay.Pass
		})
		defer set.Close()
		pcl, err := kgo.NewClient(kgo.SeedBrokers(px), kgo.Dialer(set.Dial))
		if err != nil {
			t.Fatal(err)
		}
		defer pcl.Close()
		res, err := verify.Run(ctx, verify.Config{Source: scl, Proxy: pcl, Topic: topic, Level: level}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(res[0].Line(topic))
		return res[0]
	}
	if r := run(verify.Bytes, nil); r.Err != nil || r.Diff != nil || r.Batches < 3 {
		t.Fatalf("clean run: %s", r.Line(topic))
	}
	cases := []struct {
		name    string
		corrupt func(b []byte)
		bytes   string // the field (or its start) the bytes level must name
	}{
		{"a record byte", func(b []byte) { b[len(b)-3] ^= 0x20 }, "record"},
		{"the leader epoch", func(b []byte) { binary.BigEndian.PutUint32(b[12:], binary.BigEndian.Uint32(b[12:])+1) }, "partition leader epoch"},
		{"a timestamp, CRC recomputed", func(b []byte) {
			binary.BigEndian.PutUint64(b[27:], binary.BigEndian.Uint64(b[27:])+1000)
			binary.BigEndian.PutUint32(b[17:], batch.CRC(b))
		}, "crc"},
	}
	for _, c := range cases {
		for _, level := range []verify.Level{verify.Bytes, verify.Records} {
			before := hits.Load()
			r := run(level, c.corrupt)
			if hits.Load() == before {
				t.Fatalf("%s (%s): the relay never saw the batch to corrupt", c.name, level)
			}
			if r.Err != nil || r.Diff == nil {
				t.Fatalf("%s (%s level): not caught: %s", c.name, level, r.Line(topic))
			}
			if r.Diff.Offset < th.BaseOffset || r.Diff.Offset > th.LastOffset() {
				t.Fatalf("%s (%s level): reported at offset %d, the corrupted batch is [%d, %d]", c.name, level, r.Diff.Offset, th.BaseOffset, th.LastOffset())
			}
			if level == verify.Bytes && !strings.HasPrefix(r.Diff.Field, c.bytes) {
				t.Fatalf("%s: bytes level names %q, want %q", c.name, r.Diff.Field, c.bytes)
			}
		}
	}

	// Nothing to compare is an error, not a success.
	empty := prefix + "-empty"
	if err := s.CreateTopic(ctx, empty, 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := mirror.Once(ctx, e.mirrorConfig(empty)); err != nil {
		t.Fatal(err)
	}
	pcl, _ := kgo.NewClient(kgo.SeedBrokers(px))
	defer pcl.Close()
	res, err := verify.Run(ctx, verify.Config{Source: scl, Proxy: pcl, Topic: empty}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err, verify.ErrNothing) {
		t.Fatalf("an empty range: %s", res[0].Line(empty))
	}
}
