package procstat

import (
	"os"
	"runtime"
	"testing"
)

// TestStatusKBOwnProcess reads this test process's own resident size.
func TestStatusKBOwnProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	kb, err := StatusKB(os.Getpid(), "VmRSS")
	if err != nil || kb <= 0 {
		t.Fatalf("VmRSS = %d, %v", kb, err)
	}
	if _, err := StatusKB(os.Getpid(), "NoSuchField"); err == nil {
		t.Fatal("a missing field must be an error")
	}
}
