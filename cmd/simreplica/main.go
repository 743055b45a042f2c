// Command simreplica runs one simulated OpenAI-compatible LLM replica (see
// package simreplica and docs/engine-model.md):
//
//	simreplica -addr 127.0.0.1:9001 -name a -blocks 2048 -speed 1
//
// It stops cleanly on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "simreplica:", err)
		os.Exit(1)
	}
}

// run parses args, starts the replica and serves until ctx is done. It
// logs to logw and, if ready is not nil, sends it the listening address.
func run(ctx context.Context, args []string, logw io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("simreplica", flag.ContinueOnError)
	fs.SetOutput(logw)
	d := simengine.DefaultConfig()
	var (
		addr          = fs.String("addr", "127.0.0.1:9001", "listen address")
		name          = fs.String("name", "", "replica name for the X-Sim-Replica header (default sim-PORT)")
		model         = fs.String("model", simreplica.DefaultModel, "model id listed by /v1/models and in metric labels")
		blocks        = fs.Int("blocks", d.NumBlocks, "KV cache blocks (num_gpu_blocks)")
		blockSize     = fs.Int("block-size", d.BlockSize, "tokens per KV block")
		maxSeqs       = fs.Int("max-seqs", d.MaxNumSeqs, "max running sequences (max_num_seqs)")
		maxBatched    = fs.Int("max-batched-tokens", d.MaxNumBatchedTokens, "token budget per step (max_num_batched_tokens)")
		maxModelLen   = fs.Int("max-model-len", 0, "max prompt+output tokens (default: the whole cache)")
		speed         = fs.Float64("speed", 1, "speed factor: divides every modelled step time")
		stepFixed     = fs.Duration("step-fixed", d.StepFixed, "fixed cost of one engine step")
		prefillCost   = fs.Duration("prefill-token-cost", d.PrefillTokenCost, "cost per prefill token in a step")
		seqCost       = fs.Duration("seq-cost", d.SeqCost, "cost per scheduled sequence in a step")
		outputTokens  = fs.Int("output-tokens", simreplica.DefaultOutputTokens, "natural answer length in tokens (finish_reason stop)")
		fault         = fs.String("fault", "", "global fault: 429|503|500|stall[=MS]|cut-after=N|slow=MS|refuse|restart, comma-separated")
		faultRetry    = fs.Int("fault-retry-after", simreplica.DefaultRetryAfter, "Retry-After seconds of 429/503 faults")
		faultStall    = fs.Duration("fault-stall", simreplica.DefaultStall, "duration of a stall fault without X-Sim-Stall-Ms")
		faultDuration = fs.Duration("fault-duration", 0, "clear the global fault after this long (0: never)")
		restartDown   = fs.Duration("restart-down", simreplica.DefaultRestartDown, "how long POST /sim/restart keeps the replica down")
		quiet         = fs.Bool("quiet", false, "log nothing but errors")
		engine        = fs.String("engine", string(simreplica.VLLM), "engine whose answers and metrics to write: vllm (no cached_tokens when 0), sglang (likewise; lagging gauges), llamacpp (always; -api-key guards /metrics)")
		dp            = fs.Int("dp", 1, "vllm: data-parallel engines shown in the metrics (one series each)")
		apiKey        = fs.String("api-key", "", "llamacpp: key /metrics requires, as llama-server --api-key")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	if *name == "" {
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		*name = "sim-" + port
	}
	logger := log.New(logw, "", log.LstdFlags)
	logf := logger.Printf
	if *quiet {
		logf = func(string, ...any) {}
	}
	personality, err := simreplica.ParsePersonality(*engine)
	if err != nil {
		return err
	}
	s, err := simreplica.New(simreplica.Config{
		Name:         *name,
		Model:        *model,
		Personality:  personality,
		DataParallel: *dp,
		APIKey:       *apiKey,
		Engine: simengine.Config{
			NumBlocks:           *blocks,
			BlockSize:           *blockSize,
			MaxNumSeqs:          *maxSeqs,
			MaxNumBatchedTokens: *maxBatched,
			MaxModelLen:         *maxModelLen,
			StepFixed:           *stepFixed,
			PrefillTokenCost:    *prefillCost,
			SeqCost:             *seqCost,
			Speed:               *speed,
		},
		OutputTokens:  *outputTokens,
		Fault:         *fault,
		FaultDuration: *faultDuration,
		RetryAfter:    *faultRetry,
		Stall:         *faultStall,
		RestartDown:   *restartDown,
		Logf:          logf,
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	ec := s.Config().Engine
	logf("simreplica %s listening on http://%s (model %s, %d blocks x %d tokens, max_num_seqs %d, speed %g)",
		*name, ln.Addr(), *model, ec.NumBlocks, ec.BlockSize, ec.MaxNumSeqs, ec.Speed)
	if ready != nil {
		ready <- ln.Addr().String()
	}

	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	select {
	case err := <-served:
		_ = s.Close()
		return err
	case <-ctx.Done():
	}
	start := time.Now()
	_ = s.Close()
	err = <-served
	logf("simreplica %s stopped in %v", *name, time.Since(start).Round(time.Millisecond))
	return err
}
