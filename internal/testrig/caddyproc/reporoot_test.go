package caddyproc

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// This package is internal/testrig/caddyproc of the repository.
	if _, err := os.Stat(filepath.Join(root, "internal", "testrig", "caddyproc", "reporoot.go")); err != nil {
		t.Fatalf("RepoRoot = %s, which does not hold this package: %v", root, err)
	}
	if _, err := os.Stat(filepath.Join(root, "lab", "go.mod")); err != nil {
		t.Fatalf("RepoRoot = %s stopped at another module: %v", root, err)
	}
}
