package state

import (
	"context"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"offsetgate/catalog"
	"offsetgate/rules"
)

// Guard sets, on every mirror topic, the guarded settings (rules.Guarded) it lacks as topic
// settings, with the values creation pins today. A mirror topic created by an earlier version
// may lack some (the list grew), and there a change of the destination broker's defaults (its
// cleanup policy, its largest message, unclean elections) would reach the topic and break its
// exactness. Settings the topic has are never changed; what it sets is logged. Several
// instances may run it at once: they set the same values.
func Guard(ctx context.Context, cl *kgo.Client, mirrors []catalog.Topic, log *zap.Logger) error {
	marks := map[string]*rules.Mark{}
	var names []string
	for _, t := range mirrors {
		if t.Mark != nil && !t.Mark.Removed {
			marks[t.Name] = t.Mark
			names = append(names, t.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	adm := kadm.NewClient(cl)
	described, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return err
	}
	for _, rc := range described {
		m := marks[rc.Name]
		if rc.Err != nil || m == nil {
			continue // a topic deleted meanwhile, or not described: the next start looks again
		}
		have := map[string]bool{}
		for _, c := range rc.Configs {
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				have[c.Key] = true
			}
		}
		missing := rules.MissingGuarded(have, m)
		if len(missing) == 0 {
			continue
		}
		keys := make([]string, 0, len(missing))
		for k := range missing {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		alters := make([]kadm.AlterConfig, 0, len(keys))
		for _, k := range keys {
			v := missing[k]
			alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
		}
		// IncrementalAlterConfigs takes one topic's changes per resource; kadm applies the
		// same list to every topic named, so each topic gets a call of its own.
		resps, err := adm.AlterTopicConfigs(ctx, alters, rc.Name)
		if err == nil {
			err = resps[0].Err
		}
		if err != nil {
			log.Warn("setting guarded settings a mirror topic lacks failed (the destination's defaults can reach them): give offsetgate's principal ALTER_CONFIGS on the topic, or set them by hand",
				zap.String("topic", rc.Name), zap.Strings("settings", keys), zap.Error(err))
			continue
		}
		log.Info("mirror topic lacked guarded settings; set them as creation does", zap.String("topic", rc.Name), zap.Any("settings", missing))
	}
	return nil
}

// guardLater runs Guard once in the background, a few attempts while the destination does
// not answer, until run ends.
func guardLater(run context.Context, cl *kgo.Client, cat *catalog.Catalog, log *zap.Logger) {
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := context.WithTimeout(run, time.Minute)
		err := Guard(ctx, cl, cat.Mirrors(), log)
		cancel()
		if err == nil || run.Err() != nil {
			return
		}
		log.Warn("checking mirror topics' guarded settings failed; trying again", zap.Error(err))
		select {
		case <-run.Done():
			return
		case <-time.After(10 * time.Second):
		}
	}
}
