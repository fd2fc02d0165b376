package session

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

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
			fillStrings(reflect.ValueOf(req).Elem())
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
