package rawread

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A read of a log whose start moved past the offset asked goes on from the new start, unless
// it is exact: then it stops with ErrGone and hands nothing out. A log that still starts there
// is read whole either way.
func TestEachExact(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"whole", "trimmed"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte{byte(i)}}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: "trimmed", Partition: 0, At: 4})
	if r, err := adm.DeleteRecords(ctx, o); err != nil || r.Error() != nil {
		t.Fatal(err, r.Error())
	}

	m := NewMeta(cl)
	read := func(topic string, exact bool) ([]int64, int64, error) {
		var got []int64
		fn := func(r *kgo.Record) error { got = append(got, r.Offset); return nil }
		if exact {
			next, err := m.EachExact(ctx, cl, topic, 0, 0, -1, fn)
			return got, next, err
		}
		next, err := m.EachWith(ctx, cl, nil, topic, 0, 0, -1, fn)
		return got, next, err
	}
	for _, exact := range []bool{false, true} {
		got, next, err := read("whole", exact)
		if err != nil || len(got) != 10 || got[0] != 0 || next != 10 {
			t.Fatalf("exact %v, a log from 0: read %v, next %d, %v; want offsets 0-9, next 10", exact, got, next, err)
		}
	}
	got, next, err := read("trimmed", false)
	if err != nil || len(got) != 6 || got[0] != 4 || next != 10 {
		t.Fatalf("a trimmed log: read %v, next %d, %v; want offsets 4-9 (from the new start), next 10", got, next, err)
	}
	got, next, err = read("trimmed", true)
	if !errors.Is(err, ErrGone) || len(got) != 0 || next != 0 {
		t.Fatalf("a trimmed log, exact: read %v, next %d, %v; want nothing, next 0, ErrGone", got, next, err)
	}
}
