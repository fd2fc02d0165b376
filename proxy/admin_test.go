package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"offsetgate/internal/testkafka"
	"offsetgate/proxy"
)

// The admin listener serves /healthz, /readyz (ready once the destination answered) and
// Prometheus metrics that count the traffic that went through.
func TestAdminEndpoints(t *testing.T) {
	pair := testkafka.Shared(t)
	admin := "127.0.0.1:" + itoa(freeBase(t, pair.Dest))
	p := startProxy(t, pair.Dest, "gnet", func(c *proxy.Config) { c.Admin = admin })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	waitFor(t, 10*time.Second, func() bool { code, _ := get("/readyz"); return code == 200 }, "/readyz")
	brokerMax(t, p.addr, 0) // one ApiVersions round trip through offsetgate
	_, body := get("/metrics")
	for _, want := range []string{`offsetgate_requests_total{api="ApiVersions"}`, "offsetgate_request_duration_seconds_bucket", "offsetgate_client_connections"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `offsetgate_requests_total{api="ApiVersions"} 0`) {
		t.Error("ApiVersions through offsetgate was not counted")
	}
	if code, _ := get("/debug/pprof/"); code != 404 {
		t.Fatalf("/debug/pprof/ without admin_pprof: %d, want 404", code)
	}
	admin2 := "127.0.0.1:" + itoa(freeBase(t, pair.Dest))
	startProxy(t, pair.Dest, "gnet", func(c *proxy.Config) { c.Admin, c.AdminPprof = admin2, true })
	resp, err := http.Get("http://" + admin2 + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/debug/pprof/ with admin_pprof: %d", resp.StatusCode)
	}
}
