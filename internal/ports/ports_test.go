package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestBlockIsFreeAndBelowEphemeral(t *testing.T) {
	for i := 0; i < 20; i++ {
		p, err := Block(5)
		if err != nil {
			t.Fatal(err)
		}
		if p < lowest || p+5 > ephemeralLow() {
			t.Fatalf("block %d..%d outside [%d, %d)", p, p+4, lowest, ephemeralLow())
		}
		for q := p; q < p+5; q++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(q)))
			if err != nil {
				t.Fatalf("port %d of the block is not free: %v", q, err)
			}
			l.Close()
		}
	}
}

func TestBlockSkipsPortsInUse(t *testing.T) {
	p, err := Block(1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(p, 1) {
		t.Fatalf("port %d is held by a listener but reported free", p)
	}
	if _, err := Block(0); err == nil {
		t.Fatal("Block(0) succeeded")
	}
}
