package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHAProxyConfigIsValid has haproxy check the generated configuration
// (skipped where haproxy is not installed) and checks what it must say.
func TestHAProxyConfigIsValid(t *testing.T) {
	cfg := haproxyConfig("127.0.0.1:1", []string{"127.0.0.1:2", "127.0.0.1:3"}, 64)
	for _, want := range []string{"balance hash req.body,bytes(0,256)", "hash-balance-factor 125", "server r1 127.0.0.1:3 maxconn 64",
		"set-header " + replicaHeader + " %[srv_name]", "option http-buffer-request"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	bin := haproxyBinary()
	if bin == "" {
		t.Skip("haproxy not installed")
	}
	path := filepath.Join(t.TempDir(), "h.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
}
