package proxy

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
)

// brokers is the map between the destination's brokers and the proxy listeners that stand for
// them. Event loops read and update it from rewrites (session.Addresses); the refresher keeps
// it current with offsetgate's own Metadata requests.
type brokers struct {
	cfg *Config
	// cluster names the cluster in errors ("destination", "source"); bootstrap is its seeds.
	cluster   string
	bootstrap []string
	log       *zap.Logger
	opts      []kgo.Opt // TLS and SASL for offsetgate's own client

	mu   sync.RWMutex
	real map[int32]string // node id -> real host:port
	// seen is signalled (without blocking) when a node is learned or changes address.
	seen chan struct{}
	// ready is closed after the first successful metadata refresh.
	ready     chan struct{}
	readyOnce sync.Once
}

func newBrokers(cfg *Config, cluster string, bootstrap []string, log *zap.Logger, opts []kgo.Opt) *brokers {
	return &brokers{cfg: cfg, cluster: cluster, bootstrap: bootstrap, log: log, opts: opts, real: map[int32]string{}, seen: make(chan struct{}, 1), ready: make(chan struct{})}
}

// sourceAddresses is session.Addresses for a source listener's source connections: a source
// broker is told at the listener port of its node id raised by the offset (the session raises
// the id itself).
type sourceAddresses struct {
	b     *brokers
	l     ListenerConfig
	shift int32
}

// Broker records the real address and returns the listener's.
func (a sourceAddresses) Broker(node int32, host string, port int32) (string, int32) {
	a.b.seenAt(node, host, port)
	return a.l.AdvertiseHost(), int32(a.l.BrokerPort(node + a.shift))
}

// listenerAddresses is session.Addresses for the clients of one listener: they are told the
// listener's own advertised host and broker ports, as a Kafka broker advertises each listener.
type listenerAddresses struct {
	b *brokers
	l ListenerConfig
}

// Broker records the real address and returns the listener's.
func (a listenerAddresses) Broker(node int32, host string, port int32) (string, int32) {
	a.b.seenAt(node, host, port)
	return a.l.AdvertiseHost(), int32(a.l.BrokerPort(node))
}

// seenAt records a broker's real address, as an answer gave it.
func (b *brokers) seenAt(node int32, host string, port int32) {
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	b.mu.RLock()
	known := b.real[node] == addr
	b.mu.RUnlock()
	if !known {
		b.learn(node, addr)
	}
}

func (b *brokers) learn(node int32, addr string) {
	b.mu.Lock()
	old, had := b.real[node]
	b.real[node] = addr
	b.mu.Unlock()
	if !had || old != addr {
		select {
		case b.seen <- struct{}{}:
		default:
		}
	}
}

// nodes lists the known node ids.
func (b *brokers) nodes() []int32 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]int32, 0, len(b.real))
	for id := range b.real {
		out = append(out, id)
	}
	return out
}

// resolve returns the real address of node (-1: a bootstrap broker), refreshing metadata when
// the node is unknown. It may block: never call it on an event loop.
func (b *brokers) resolve(ctx context.Context, node int32, attempt int) (string, error) {
	if node < 0 {
		return b.bootstrap[attempt%len(b.bootstrap)], nil
	}
	for i := 0; ; i++ {
		b.mu.RLock()
		addr, ok := b.real[node]
		b.mu.RUnlock()
		if ok {
			return addr, nil
		}
		if i == 3 {
			return "", fmt.Errorf("%s broker node %d is unknown to the cluster metadata", b.cluster, node)
		}
		if err := b.refresh(ctx); err != nil {
			b.log.Warn("metadata refresh failed", zap.Error(err))
		}
	}
}

// refresh asks the cluster for its brokers with offsetgate's own Metadata request.
func (b *brokers) refresh(ctx context.Context) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.bootstrap...), kgo.DialTimeout(b.cfg.Limits.DialTimeout),
		kgo.RequestRetries(1), kgo.RetryTimeout(5 * time.Second)}, b.opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		return fmt.Errorf("%s metadata from %v: %w", b.cluster, b.bootstrap, err)
	}
	for _, br := range resp.Brokers {
		b.learn(br.NodeID, net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port))))
	}
	b.readyOnce.Do(func() { close(b.ready) })
	return nil
}

// isReady reports whether the destination has answered at least once.
func (b *brokers) isReady() bool {
	select {
	case <-b.ready:
		return true
	default:
		return false
	}
}
