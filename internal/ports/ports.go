// Package ports finds free loopback ports for tests, benchmarks and the demo.
//
// Ports are picked below the kernel's ephemeral range: a port found free and then closed
// inside that range can be taken by any outgoing connection (a client's, a broker's) before
// its owner binds it again, which is how a listener of a test once failed with "address
// already in use".
package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the first port ever handed out: well above the registered services that a
// developer machine tends to run.
const lowest = 15000

// Block finds a port p such that p, p+1, ..., p+n-1 are all free on 127.0.0.1 and below the
// ephemeral range.
func Block(n int) (int, error) {
	if n < 1 {
		return 0, fmt.Errorf("ports: block of %d ports", n)
	}
	top := ephemeralLow() - n
	if top <= lowest {
		return 0, fmt.Errorf("ports: no room for %d ports below the ephemeral range (%d)", n, ephemeralLow())
	}
	for i := 0; i < 500; i++ {
		p := lowest + rand.IntN(top-lowest)
		if free(p, n) {
			return p, nil
		}
	}
	return 0, errors.New("ports: no free block of ports on loopback")
}

// One is Block(1).
func One() (int, error) { return Block(1) }

// Addr is "127.0.0.1:p" for a free port p.
func Addr() (string, error) {
	p, err := One()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

func free(p, n int) bool {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for q := p; q < p+n; q++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(q)))
		if err != nil {
			return false
		}
		ls = append(ls, l)
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux); 32768 elsewhere,
// which is Linux's default and below the IANA range other systems use.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > lowest {
				return v
			}
		}
	}
	return 32768
}
