package session

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fill gives a request something in every field a handler reads: every string and string
// pointer "t", every slice of structs or numbers one element (filled in turn), so a body has
// topics, partitions and transactional ids to cut through.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			if v.Type().Elem().Kind() != reflect.String {
				return
			}
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(v.Elem(), depth)
	case reflect.String:
		v.SetString("t")
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i); f.IsExported() && f.Name != "Version" && f.Name != "UnknownTags" {
				fill(v.Field(i), depth)
			}
		}
	case reflect.Slice:
		if depth > 4 || v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		e := reflect.New(v.Type().Elem()).Elem()
		if e.Kind() == reflect.Struct {
			// kmsg's Default sets the fields Kafka gives defaults (-1 epochs and the like).
			if d, ok := e.Addr().Interface().(interface{ Default() }); ok {
				d.Default()
			}
		}
		fill(e, depth+1)
		v.Set(reflect.Append(v, e))
	}
}

// A request of an api offsetgate judges or translates whose body kmsg cannot decode closes the
// connection and reaches no broker: every such api at every version offsetgate allows, cut
// short at every byte of its body. Kafka's own decoder might read such a body differently
// (or fill what is missing), so forwarding it would pass a request offsetgate never judged.
func TestUndecodableBodiesRefused(t *testing.T) {
	checked := 0
	for key, rule := range apiRules {
		if rule.class == passed {
			continue
		}
		hd := handlerFor(int16(key))
		if hd == nil {
			continue
		}
		rng, ok := allowed[key]
		if !ok {
			continue
		}
		for v := rng.min; v <= rng.max; v++ {
			req := kmsg.RequestForKey(int16(key))
			fill(reflect.ValueOf(req).Elem(), 0)
			req.SetVersion(v)
			frame := reqFrame(req, 7)
			h, err := parseReqHeader(frame[4:])
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(int16(key)), v, err)
			}
			body := frame[4+h.bodyOff:]
			for cut := 0; cut < len(body); cut++ {
				short := append([]byte(nil), frame[:4+h.bodyOff+cut]...)
				probe := kmsg.RequestForKey(int16(key))
				probe.SetVersion(v)
				if probe.ReadFrom(short[4+h.bodyOff:]) == nil {
					continue // still a whole request to kmsg: judged as one
				}
				short[0], short[1], short[2], short[3] = byte((len(short)-4)>>24), byte((len(short)-4)>>16), byte((len(short)-4)>>8), byte(len(short)-4)
				fc := &fakeConn{}
				s := New(Config{Catalog: fuzzCatalog{}, MaxFrame: 1 << 20, NoSASL: true}, fc)
				_, err := s.HandleClient(short)
				s.Close()
				if err == nil || fc.upstream.Len() > 0 || fc.client.Len() > 0 {
					t.Errorf("%s v%d cut to %d of %d body bytes: error %v, %d bytes forwarded, %d answered; want the connection closed, nothing sent",
						kmsg.NameForKey(int16(key)), v, cut, len(body), err, fc.upstream.Len(), fc.client.Len())
				}
				checked++
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d cut requests checked", checked)
	}
	t.Logf("%d cut requests refused", checked)
}
