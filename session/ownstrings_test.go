package session

import (
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fillStrings sets every string of v (and of the structs and slices it holds) to a value of
// its own, so that each one is encoded into the frame; an empty slice of structs or numbers
// gets one element (a topic its partition, say).
func fillStrings(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			if v.Type().Elem().Kind() != reflect.String {
				return
			}
			v.Set(reflect.New(v.Type().Elem()))
		}
		fillStrings(v.Elem())
	case reflect.String:
		v.SetString("name-in-frame")
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fillStrings(v.Field(i))
			}
		}
	case reflect.Slice:
		if k := v.Type().Elem().Kind(); v.Len() == 0 && (k == reflect.Struct || k >= reflect.Int && k <= reflect.Int64) {
			v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
		}
		for i := 0; i < v.Len(); i++ {
			fillStrings(v.Index(i))
		}
	}
}

// collectStrings lists every string reachable from v, with its path.
func collectStrings(v reflect.Value, path string, out map[string]string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			collectStrings(v.Elem(), path, out)
		}
	case reflect.String:
		out[path] = v.String()
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				collectStrings(v.Field(i), path+"."+v.Type().Field(i).Name, out)
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			collectStrings(v.Index(i), path, out)
		}
	}
}

// A request decoded without copying (its record sets stay in the frame) keeps none of its
// strings in the frame: the frame's buffer is reused once the request is done, while topic
// names are kept for good (the writer's partitions, metric labels). A name left in the frame
// once sent a write planned for one mirror topic to another topic of the same name length.
func TestUnsafeDecodeOwnsStrings(t *testing.T) {
	found := 0
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		hd := handlerFor(key)
		if hd == nil || !hd.unsafe {
			continue
		}
		found++
		proto := kmsg.RequestForKey(key)
		for v := int16(0); v <= proto.MaxVersion(); v++ {
			in := kmsg.RequestForKey(key)
			in.SetVersion(v)
			fillStrings(reflect.ValueOf(in))
			body := in.AppendTo(nil)
			out := kmsg.RequestForKey(key)
			out.SetVersion(v)
			r := &request{body: body}
			if err := r.decode(out, true); err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			for i := range body {
				body[i] = 'X' // the buffer, reused for another request
			}
			got := map[string]string{}
			collectStrings(reflect.ValueOf(out), kmsg.NameForKey(key), got)
			if len(got) == 0 {
				t.Fatalf("%s v%d: no string decoded", kmsg.NameForKey(key), v)
			}
			for path, s := range got {
				if strings.Contains(s, "X") {
					t.Fatalf("%s v%d: %s = %q still points into the frame", kmsg.NameForKey(key), v, path, s)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no handler decodes without copying; the test checks nothing")
	}
}
