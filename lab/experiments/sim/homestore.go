package sim

import "github.com/llmroute/caddy-llmroute/policies"

// homeStore is the store the routers share with SharedHomes: what
// Valkey's SET NX GET gives the module's homes_directory, exactly (no
// key is lost; the module's TTL, an hour by default, outlasts a run).
// The simulator runs one event at a time, so it takes no lock.
type homeStore struct {
	homes map[uint64]string
}

// ClaimHome implements policies.HomeStore.
func (s *homeStore) ClaimHome(key uint64, addr string) (string, bool) {
	if h, ok := s.homes[key]; ok {
		return h, true
	}
	s.homes[key] = addr
	return addr, true
}

// Interface guards
var _ policies.HomeStore = (*homeStore)(nil)
