package proxy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"gopkg.in/yaml.v3"

	"offsetgate/rules"
)

// The configuration file is re-read when it changes; only its mirroring section takes effect
// without a restart. A new file is taken only when
//
//   - it has not changed between two looks a poll interval apart, and not while it was read
//     (a writer that writes in place is caught mid-way at most once, and then waited for; the
//     safe way is still to write a new file and rename it over the old one);
//   - it parses and validates as a whole, as at start;
//   - each mirroring rule can match a client of the running offsetgate on a listener it may
//     come through (a certificate rule needs a listener in force that asks for client
//     certificates, a sasl_user rule a SASL listener and a destination that takes SASL),
//     whatever the file now says of those sections.
//
// Otherwise the rules in force stay and the log says why. A change to a section that is read
// only at start (tls, identities, upstream_sasl, listen, ...) is logged as a warning naming it.

// configWatcher follows the configuration file.
type configWatcher struct {
	path    string
	running Config            // the configuration the server started with
	started map[string]string // its sections read at start only, as YAML
	log     *zap.Logger
	apply   func(*rules.Policy)

	seen    string // the file's stamp at the last look
	taken   string // the stamp of the file last read (taken or refused)
	content []byte // the content last read
	current string // the mirroring section in force, as YAML
}

func newConfigWatcher(running *Config, log *zap.Logger, apply func(*rules.Policy)) *configWatcher {
	w := &configWatcher{path: running.Path, running: *running, started: startOnlySections(running), log: log, apply: apply,
		current: yamlOf(running.Mirroring)}
	w.seen = w.stamp()
	w.taken = w.seen
	w.content, _ = os.ReadFile(w.path)
	return w
}

func (w *configWatcher) stamp() string {
	st, err := os.Stat(w.path)
	if err != nil {
		return ""
	}
	ino := uint64(0)
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino // a file renamed over this one
	}
	return fmt.Sprintf("%d/%d/%d", st.Size(), st.ModTime().UnixNano(), ino)
}

// poll is one look at the file.
func (w *configWatcher) poll() {
	now := w.stamp()
	if now == "" {
		return // being replaced, or gone: keep what is in force
	}
	if now != w.seen {
		w.seen = now // changed since the last look: wait until it holds still
		return
	}
	if now == w.taken {
		return
	}
	b, err := os.ReadFile(w.path)
	if err != nil {
		w.log.Error("config reload: cannot read the file; the previous configuration stays", zap.Error(err))
		return
	}
	if after := w.stamp(); after != now {
		w.seen = after // written while read: look again later
		return
	}
	w.taken = now
	if bytes.Equal(b, w.content) {
		return
	}
	w.content = b
	w.reload(b)
}

// reload validates a new file and takes its mirroring section.
func (w *configWatcher) reload(b []byte) {
	refuse := func(why string, err error) {
		w.log.Error("config reload refused: "+why+"; the previous configuration stays", zap.String("file", w.path), zap.Error(err))
	}
	c, err := parseConfig(b, w.path)
	if err != nil {
		refuse("the file does not parse", err)
		return
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		refuse("the file does not validate", err)
		return
	}
	inForce := w.running
	inForce.Mirroring = c.Mirroring
	if errs := inForce.validateMirroring(); len(errs) > 0 {
		refuse("a mirroring rule can never match with the listeners in force (listeners, listen, tls and upstream_sasl are read at start only)", joinErrs(errs))
		return
	}
	pol, err := rules.NewPolicy(c.Mirroring)
	if err != nil {
		refuse("the mirroring section does not validate", err)
		return
	}
	now := startOnlySections(&c)
	for _, section := range sortedKeys(now) {
		if now[section] == w.started[section] {
			continue
		}
		w.log.Warn("config reload: section "+section+" changed, but it is read at start only; restart offsetgate to apply it",
			zap.String("section", section), zap.String("file", w.path))
	}
	if yamlOf(c.Mirroring) == w.current {
		w.log.Info("config reload: the mirroring rules are unchanged", zap.String("file", w.path))
		return
	}
	w.apply(pol)
	w.current = yamlOf(c.Mirroring)
	w.log.Info("mirroring rules reloaded", zap.Int("clients", len(c.Mirroring.Clients)), zap.String("file", w.path))
}

func joinErrs(errs []error) error {
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// startOnlySections is every section (top-level key) but mirroring, as YAML.
func startOnlySections(c *Config) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || tag == "mirroring" {
			continue
		}
		out[tag] = yamlOf(v.Field(i).Interface())
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// yamlOf is a value as YAML, so that nil and empty compare equal.
func yamlOf(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

// watchConfig polls the configuration file every second until ctx ends. The watcher is made
// (and the file's state taken) by the caller, before the server is ready: a change written
// right after that is a change.
func (s *Server) watchConfig(ctx context.Context, w *configWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		w.poll()
	}
}
