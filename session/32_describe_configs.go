package session

// DescribeConfigs (key 32).
//
// Passes through; for a mirror topic the answer also lists offsetgate's own settings: the mark
// (offsetgate.produce.at.offset=true) and the source settings stored with it
// (offsetgate.source.*), which the broker never saw. For offsetgate's marks topic it answers
// offsetgate.proxy=true itself, whatever the broker said of the topic (a refusal included):
// that is how a client (offsetgate mirror, verify, status, promote) tells offsetgate from a
// plain broker given by mistake, which never answers a config named offsetgate.*.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
)

var describeConfigsHandler = handler{response: rewriteDescribeConfigs}

func rewriteDescribeConfigs(s *Session, version int16, body []byte) ([]byte, bool, error) {
	if s.cfg.Catalog == nil {
		return nil, false, nil
	}
	resp := kmsg.DescribeConfigsResponse{Version: version}
	if err := resp.ReadFrom(body); err != nil {
		return nil, false, err
	}
	changed := false
	for i := range resp.Resources {
		res := &resp.Resources[i]
		add := func(name, value string) {
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			v := value
			c.Name, c.Value, c.Source = name, &v, kmsg.ConfigSourceDynamicTopicConfig
			res.Configs = append(res.Configs, c)
		}
		if res.ResourceType == kmsg.ConfigResourceTypeTopic && res.ResourceName == catalog.MarksTopic {
			if res.ErrorCode != 0 {
				res.ErrorCode, res.ErrorMessage, res.Configs = 0, nil, nil
			}
			add(rules.ProxyKey, "true")
			res.Configs[len(res.Configs)-1].ReadOnly = true
			changed = true
			continue
		}
		if res.ResourceType != kmsg.ConfigResourceTypeTopic || res.ErrorCode != 0 {
			continue
		}
		t := s.mark(res.ResourceName)
		if t == nil {
			continue
		}
		add(rules.MarkKey, "true")
		keys := make([]string, 0, len(t.Mark.Source))
		for k := range t.Mark.Source {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			add(rules.SourcePrefix+k, t.Mark.Source[k])
		}
		changed = true
	}
	if !changed {
		return nil, false, nil
	}
	return resp.AppendTo(nil), true, nil
}
