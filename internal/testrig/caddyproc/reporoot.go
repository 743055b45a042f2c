package caddyproc

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
)

// RepoRoot returns the repository root: the directory of the plugin's
// go.mod (module github.com/llmroute/caddy-llmroute), from the working
// directory up, so that the tools that build or find ./caddy work from the
// repository and from its nested lab module alike.
func RepoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/llmroute/caddy-llmroute\n")) {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", errors.New("the llmroute repository's go.mod is not above the working directory: run from the repository")
		}
		d = p
	}
}
