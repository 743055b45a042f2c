package sim

import (
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

// RunAll runs the simulations cfgs[i] on ws[i], jobs at a time (at least
// one), in the order given, and calls done after each with its result and
// how long it took; done is called from one goroutine at a time. It
// returns when every simulation has ended.
func RunAll(cfgs []Config, ws []*workload.Workload, jobs int, done func(i int, res *Result, err error, d time.Duration)) {
	var mu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(jobs, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				res, err := Run(cfgs[i], ws[i])
				d := time.Since(t0)
				mu.Lock()
				done(i, res, err, d)
				mu.Unlock()
			}
		}()
	}
	for i := range cfgs {
		next <- i
	}
	close(next)
	wg.Wait()
}
