package proxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// connLimits counts open client connections, in all and per source address
// (limits.max_connections, limits.max_connections_per_ip).
type connLimits struct {
	mu      sync.Mutex
	total   int
	perIP   map[string]int
	lastLog time.Time
	refused int // refused since the last log line
}

// refuseLogEvery is how often at most a refused connection is logged.
const refuseLogEvery = 10 * time.Second

// takeConn admits a new client connection, or refuses it (counted, and logged at most once
// every refuseLogEvery); the caller closes a refused connection at once. An admitted
// connection gives its place back with releaseConn(ip).
func (s *Server) takeConn(addr net.Addr) (ip string, ok bool) {
	ip = addr.String()
	if h, _, err := net.SplitHostPort(ip); err == nil {
		ip = h
	}
	maxAll, maxIP := s.cfg.Limits.MaxConnections, s.cfg.Limits.MaxConnectionsPerIP
	l := &s.climits
	l.mu.Lock()
	var limit string
	switch {
	case maxAll > 0 && l.total >= maxAll:
		limit = "max_connections"
	case maxIP > 0 && l.perIP[ip] >= maxIP:
		limit = "max_connections_per_ip"
	default:
		l.total++
		if l.perIP == nil {
			l.perIP = map[string]int{}
		}
		l.perIP[ip]++
		l.mu.Unlock()
		return ip, true
	}
	l.refused++
	n, logNow := l.refused, time.Since(l.lastLog) >= refuseLogEvery
	if logNow {
		l.refused, l.lastLog = 0, time.Now()
	}
	l.mu.Unlock()
	s.metrics.refused.WithLabelValues(limit).Inc()
	if logNow {
		s.log.Warn("refusing client connections over a connection limit", zap.String("limit", "limits."+limit),
			zap.String("source", ip), zap.Int("refused_since_last_line", n))
	}
	return ip, false
}

// releaseConn gives back the place of a connection takeConn admitted.
func (s *Server) releaseConn(ip string) {
	l := &s.climits
	l.mu.Lock()
	l.total--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
	l.mu.Unlock()
}

// errIdle closes a connection idle for limits.connections_max_idle.
var errIdle = errors.New("idle for limits.connections_max_idle")

// closeIdle closes, until ctx ends, client connections that sent no request for
// limits.connections_max_idle and have none in flight.
func (s *Server) closeIdle(ctx context.Context) {
	idle := s.cfg.Limits.ConnectionsMaxIdle
	t := time.NewTicker(min(time.Second, max(idle/4, 10*time.Millisecond)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-idle).UnixNano()
		s.mu.Lock()
		var ncs []*netClient
		for nc := range s.conns {
			if nc.lastActive.Load() < cutoff {
				ncs = append(ncs, nc)
			}
		}
		s.mu.Unlock()
		for _, nc := range ncs {
			nc.closeIfIdle(cutoff)
		}
		if s.gnet != nil {
			s.gnet.closeIdle(cutoff)
		}
	}
}

// pollFailed reports, once, that the gnet transport cannot stop reading a socket: the budget
// then stops only the handling of a connection's frames.
func (s *Server) pollFailed(err error) {
	if s.pollWarned.CompareAndSwap(false, true) {
		s.log.Error("cannot stop reading a connection over its share of limits.max_held_bytes; its input is buffered instead", zap.Error(err))
	}
}
