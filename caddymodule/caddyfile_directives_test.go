package caddymodule

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// maxPolicyDirectives is how many top-level directives `lb_policy llm` may
// have: the measured constants live in the JSON-only tuning object, so the
// Caddyfile keeps what a user sets.
const maxPolicyDirectives = 16

// TestPolicyDirectives counts the directives UnmarshalCaddyfile accepts, from
// its source, and holds each to the parser's doc comment and to the README's
// reference, so that a directive added without its docs fails here.
func TestPolicyDirectives(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "caddyfile_policy.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "UnmarshalCaddyfile" {
			fn = fd
		}
	}
	if fn == nil {
		t.Fatal("UnmarshalCaddyfile not found")
	}
	var names []string
	// The first switch in the function is the directives' one; the
	// cooldown and engine_metrics blocks are parsed by their own functions.
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		sw, ok := n.(*ast.SwitchStmt)
		if !ok || names != nil {
			return names == nil
		}
		for _, c := range sw.Body.List {
			for _, e := range c.(*ast.CaseClause).List {
				lit, ok := e.(*ast.BasicLit)
				if !ok {
					continue
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, s)
			}
		}
		return false
	})
	if len(names) < 10 {
		t.Fatalf("found %d directives (%v): the switch was not read", len(names), names)
	}
	if len(names) > maxPolicyDirectives {
		t.Errorf("lb_policy llm has %d directives, at most %d: %v", len(names), maxPolicyDirectives, names)
	}
	doc := fn.Doc.Text()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, gone := removedPolicyOptions[n]; gone {
			t.Errorf("%s is both accepted and listed as removed", n)
		}
		if !strings.Contains(doc, "\t"+n+" ") && !strings.Contains(doc, "\t"+n+"\n") {
			t.Errorf("%s is not in UnmarshalCaddyfile's doc comment", n)
		}
		if !strings.Contains(string(readme), n) {
			t.Errorf("%s is not in the README", n)
		}
	}
	t.Logf("%d directives: %v", len(names), names)
}
