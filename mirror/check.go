package mirror

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"offsetgate/catalog"
	"offsetgate/rules"
)

// checkTimeout bounds each of the checks made before a run starts: a cluster that does not
// answer in that time is reported, not waited for.
const checkTimeout = 10 * time.Second

// Reachable asks cl's brokers for the cluster's brokers (a Metadata request naming no topic),
// so that an address nobody answers on is reported at once, naming what it was for ("the
// source cluster", "offsetgate").
func Reachable(ctx context.Context, cl *kgo.Client, what string, addrs []string) error {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	if _, err := anyAddress(cctx, addrs, func() (kmsg.Response, error) { return req.RequestWith(cctx, cl) }); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s at %s cannot be reached: %w", what, strings.Join(addrs, ","), err)
	}
	return nil
}

// CheckOffsetgate tells offsetgate from a plain Kafka broker given in its place (the
// destination's own brokers, or the source's): offsetgate answers a DescribeConfigs of its marks
// topic with offsetgate.proxy=true, which no broker ever answers (no broker has a config named
// offsetgate.*). source, when given, is the source cluster's addresses, named in the message
// when the two are the same.
func CheckOffsetgate(ctx context.Context, px *kgo.Client, addrs, source []string) error {
	for _, a := range addrs {
		for _, s := range source {
			if a == s {
				return fmt.Errorf("--proxy %s is the source cluster's address (--source): give offsetgate's listener, in front of the destination", a)
			}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeTopic, catalog.MarksTopic, []string{rules.ProxyKey}
	req.Resources = append(req.Resources, res)
	kr, err := anyAddress(cctx, addrs, func() (kmsg.Response, error) { return req.RequestWith(cctx, px) })
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("offsetgate at %s cannot be reached: %w", strings.Join(addrs, ","), err)
	}
	resp := kr.(*kmsg.DescribeConfigsResponse)
	for _, r := range resp.Resources {
		for _, c := range r.Configs {
			if c.Name == rules.ProxyKey && r.ErrorCode == 0 {
				return nil
			}
		}
	}
	what := "a Kafka broker that is not offsetgate"
	if len(resp.Resources) == 1 {
		switch err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); {
		case err == nil:
			what = "a Kafka broker of the cluster behind offsetgate (it holds " + catalog.MarksTopic + "): the destination itself, not offsetgate in front of it"
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			what = "a plain Kafka broker (the source, or a cluster with no offsetgate in front of it)"
		}
	}
	return fmt.Errorf("--proxy %s does not look like offsetgate: it answers as %s; give offsetgate's listener (offsetgate serve's listen address)", strings.Join(addrs, ","), what)
}

// anyAddress sends a request that any of several addresses may answer (offsetgate instances,
// a cluster's brokers): one that cannot be reached is not the answer while another can. The
// client asks its addresses in turn, so each is tried before the check gives up.
func anyAddress(ctx context.Context, addrs []string, send func() (kmsg.Response, error)) (kmsg.Response, error) {
	var err error
	for attempt := 0; attempt < 2*max(len(addrs), 1); attempt++ {
		var resp kmsg.Response
		if resp, err = send(); err == nil || ctx.Err() != nil {
			return resp, err
		}
	}
	return nil, err
}
