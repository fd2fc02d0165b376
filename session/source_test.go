package session

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// nodeFields are the kmsg field names that hold broker node ids (as int32 or []int32).
var nodeFields = map[string]bool{
	"NodeID": true, "LeaderID": true, "BrokerID": true, "Leader": true, "ControllerID": true,
	"Replicas": true, "ISR": true, "OfflineReplicas": true, "AddingReplicas": true, "RemovingReplicas": true,
	"EligibleLeaderReplicas": true, "LastKnownELR": true, "PreferredReadReplica": true,
	"ReplicaID": true, "ID": true, "BrokerIDs": true, "ReplicaNodes": true, "ISRNodes": true,
}

// configResource reports whether a struct is a config resource (a broker one is named by its
// node id); ACL resources are never brokers.
func configResource(t reflect.Type) bool {
	f, ok := t.FieldByName("ResourceType")
	return ok && f.Type == reflect.TypeOf(kmsg.ConfigResourceType(0))
}

// namesNodes reports the first field path of v's type that holds node ids.
func namesNodes(t reflect.Type, path string, seen map[reflect.Type]bool) string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return ""
	}
	seen[t] = true
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		ft := f.Type
		isID := ft.Kind() == reflect.Int32 || (ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Int32)
		if isID && nodeFields[f.Name] {
			return path + "." + f.Name
		}
		if f.Name == "ResourceName" && configResource(t) {
			return path + ".ResourceName" // broker resources are named by node id
		}
		if p := namesNodes(ft, path+"."+f.Name, seen); p != "" {
			return p
		}
	}
	return ""
}

// Every api key offsetgate forwards is classified for source connections, and a key whose
// request or answer (as kmsg knows them) has a node-id field is not classified as free of
// node ids: a field kmsg learns cannot carry a source node id unraised to a client.
func TestSourceNodesComplete(t *testing.T) {
	for k := range apiRules {
		if _, ok := sourceNodes[k]; !ok {
			t.Errorf("api key %d (%s) is forwarded but not classified in sourceNodes", k, kmsg.NameForKey(int16(k)))
		}
	}
	for k, use := range sourceNodes {
		if _, ok := apiRules[k]; !ok {
			t.Errorf("api key %d (%s) is classified in sourceNodes but not forwarded", k, kmsg.NameForKey(int16(k)))
		}
		if use != noNodes {
			continue
		}
		for _, msg := range []any{kmsg.RequestForKey(int16(k)), kmsg.ResponseForKey(int16(k))} {
			if p := namesNodes(reflect.TypeOf(msg), reflect.TypeOf(msg).Elem().Name(), map[reflect.Type]bool{}); p != "" {
				t.Errorf("api key %d (%s) is classified noNodes but %s may name a broker", k, kmsg.NameForKey(int16(k)), p)
			}
		}
	}
}

// presented is an Addresses that tells every broker at host "og" and port 20000+id.
type presented struct{ real map[int32]string }

func (p *presented) Broker(node int32, host string, _ int32) (string, int32) {
	p.real[node] = host
	return "og", 20000 + node
}

// A source connection's answers name the source's brokers with raised ids at the listener's
// addresses, and its requests name them lowered; a request naming an id that is not a
// presented source broker is refused.
func TestSourceNodeShift(t *testing.T) {
	addrs := &presented{real: map[int32]string{}}
	fc := &fakeConn{}
	s := New(Config{NodeShift: 1000, Addresses: addrs}, fc)

	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.SetVersion(4)
	dc.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: resourceBroker, ResourceName: "1002"}, {ResourceType: 2, ResourceName: "t"}}
	var in []byte
	in = append(in, reqFrame(md, 1)...)
	in = append(in, reqFrame(dc, 2)...)
	if _, err := s.HandleClient(in); err != nil {
		t.Fatal(err)
	}
	up := frames(t, fc.upstream.Bytes())
	if len(up) != 2 {
		t.Fatalf("%d frames forwarded, want 2", len(up))
	}
	gotDC := kmsg.NewPtrDescribeConfigsRequest()
	gotDC.SetVersion(4)
	h, err := parseReqHeader(up[1][4:])
	if err != nil {
		t.Fatal(err)
	}
	if err := gotDC.ReadFrom(up[1][4+h.bodyOff:]); err != nil {
		t.Fatal(err)
	}
	if gotDC.Resources[0].ResourceName != "2" || gotDC.Resources[1].ResourceName != "t" {
		t.Fatalf("broker resource sent as %q, topic as %q; want 2 and t", gotDC.Resources[0].ResourceName, gotDC.Resources[1].ResourceName)
	}

	mr := kmsg.NewPtrMetadataResponse()
	mr.SetVersion(12)
	mr.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 1, Host: "s1", Port: 9092}, {NodeID: 2, Host: "s2", Port: 9092}}
	mr.ControllerID = 2
	topic := "t"
	mr.Topics = []kmsg.MetadataResponseTopic{{Topic: &topic, Partitions: []kmsg.MetadataResponseTopicPartition{{Partition: 0, Leader: 1, Replicas: []int32{1, 2}, ISR: []int32{1}, OfflineReplicas: []int32{2}}}}}
	dr := kmsg.NewPtrDescribeConfigsResponse()
	dr.SetVersion(4)
	dr.Resources = []kmsg.DescribeConfigsResponseResource{{ResourceType: resourceBroker, ResourceName: "2"}}
	var answers []byte
	answers = append(answers, respFrame(1, true, mr)...)
	answers = append(answers, respFrame(2, true, dr)...)
	if _, err := s.HandleUpstream(answers); err != nil {
		t.Fatal(err)
	}
	out := frames(t, fc.client.Bytes())
	if len(out) != 2 {
		t.Fatalf("%d answers, want 2", len(out))
	}
	gotMR := kmsg.NewPtrMetadataResponse()
	gotMR.SetVersion(12)
	if err := gotMR.ReadFrom(out[0][9:]); err != nil {
		t.Fatal(err)
	}
	b := gotMR.Brokers
	if b[0].NodeID != 1001 || b[0].Host != "og" || b[0].Port != 20001 || b[1].NodeID != 1002 || b[1].Port != 20002 {
		t.Fatalf("brokers presented as %+v", b)
	}
	if addrs.real[1] != "s1" || addrs.real[2] != "s2" {
		t.Fatalf("real addresses recorded under %v, want the source's own ids", addrs.real)
	}
	p := gotMR.Topics[0].Partitions[0]
	if gotMR.ControllerID != 1002 || p.Leader != 1001 || !reflect.DeepEqual(p.Replicas, []int32{1001, 1002}) ||
		!reflect.DeepEqual(p.ISR, []int32{1001}) || !reflect.DeepEqual(p.OfflineReplicas, []int32{1002}) {
		t.Fatalf("controller %d, partition %+v: ids not raised", gotMR.ControllerID, p)
	}
	gotDR := kmsg.NewPtrDescribeConfigsResponse()
	gotDR.SetVersion(4)
	if err := gotDR.ReadFrom(out[1][9:]); err != nil {
		t.Fatal(err)
	}
	if gotDR.Resources[0].ResourceName != "1002" {
		t.Fatalf("broker resource answered as %q, want 1002", gotDR.Resources[0].ResourceName)
	}

	// A destination node id (below the shift) named on a source connection is refused.
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.SetVersion(7)
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "x", NumPartitions: -1, ReplicationFactor: -1,
		ReplicaAssignment: []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{1}}}}}
	s2 := New(Config{NodeShift: 1000, Addresses: addrs}, &fakeConn{})
	if _, err := s2.HandleClient(reqFrame(ct, 3)); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a CreateTopics naming node 1 on a source connection: %v, want ErrForbidden", err)
	}
	// A follower's fetch is not taken from a client.
	fr := kmsg.NewPtrFetchRequest()
	fr.SetVersion(12)
	fr.ReplicaID = 3
	s3 := New(Config{NodeShift: 1000, Addresses: addrs}, &fakeConn{})
	if _, err := s3.HandleClient(reqFrame(fr, 4)); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a replica's Fetch on a source connection: %v, want ErrForbidden", err)
	}
}

// A consumer's Fetch on a source connection waits at most SourceFetchWait at the source: a
// longer wait is lowered, a shorter one and every wait without the limit go as the client
// sent them.
func TestSourceFetchWait(t *testing.T) {
	fetch := func(wait int32) []byte {
		fr := kmsg.NewPtrFetchRequest()
		fr.SetVersion(12)
		fr.ReplicaID, fr.MaxWaitMillis, fr.MaxBytes = -1, wait, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "t"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		fr.Topics = append(fr.Topics, ft)
		return reqFrame(fr, 7)
	}
	for _, c := range []struct {
		limit      time.Duration
		wait, want int32
	}{{time.Second, 5000, 1000}, {time.Second, 500, 500}, {0, 5000, 5000}} {
		fc := &fakeConn{}
		s := New(Config{NodeShift: 1000, Addresses: &presented{real: map[int32]string{}}, SourceFetchWait: c.limit}, fc)
		if _, err := s.HandleClient(fetch(c.wait)); err != nil {
			t.Fatal(err)
		}
		up := frames(t, fc.upstream.Bytes())
		if len(up) != 1 {
			t.Fatalf("%d frames forwarded, want 1", len(up))
		}
		h, err := parseReqHeader(up[0][4:])
		if err != nil {
			t.Fatal(err)
		}
		got := kmsg.NewPtrFetchRequest()
		got.SetVersion(12)
		if err := got.ReadFrom(up[0][4+h.bodyOff:]); err != nil {
			t.Fatal(err)
		}
		if got.MaxWaitMillis != c.want || len(got.Topics) != 1 || got.Topics[0].Topic != "t" {
			t.Errorf("limit %v, client's wait %d ms: the source was asked to wait %d ms (topics %+v), want %d",
				c.limit, c.wait, got.MaxWaitMillis, got.Topics, c.want)
		}
	}
}
