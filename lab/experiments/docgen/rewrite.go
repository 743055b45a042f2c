package docgen

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Rewrite returns doc with every marked section's body rendered from
// recs, and how many sections it rendered. An unknown section, a marker
// error or a record that cannot be read is an error.
func Rewrite(doc string, recs *Records) (string, int, error) {
	secs, err := Parse(doc)
	if err != nil {
		return "", 0, err
	}
	var b strings.Builder
	last := 0
	for _, s := range secs {
		content, err := Render(s.Name, recs)
		if err != nil {
			return "", 0, fmt.Errorf("line %d: %w", s.Line, err)
		}
		b.WriteString(doc[last:s.start])
		b.WriteString(Body(content, s.Indent))
		last = s.end
	}
	b.WriteString(doc[last:])
	return b.String(), len(secs), nil
}

// Mismatch is a marked section whose body differs from what its records
// render.
type Mismatch struct {
	Doc  string // the doc's path
	Name string // the section
	Line int    // the begin marker's line
	// Have is the section's body in the doc, Want what the records
	// render.
	Have, Want string
}

// String names the section and shows the first line that differs.
func (m Mismatch) String() string {
	have, want := strings.Split(m.Have, "\n"), strings.Split(m.Want, "\n")
	for i := 0; i < max(len(have), len(want)); i++ {
		var h, w string
		if i < len(have) {
			h = have[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if h != w {
			return fmt.Sprintf("%s:%d: section %s differs from its records (run `go -C lab run ./cmd/llmexp docs`):\n  doc:     %q\n  records: %q",
				m.Doc, m.Line+1+i, m.Name, h, w)
		}
	}
	return fmt.Sprintf("%s:%d: section %s differs from its records", m.Doc, m.Line, m.Name)
}

// Check renders every marked section of the docs at paths from recs and
// returns the sections whose body differs, and how many sections it
// checked.
func Check(paths []string, recs *Records) ([]Mismatch, int, error) {
	var out []Mismatch
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, n, err
		}
		ms, k, err := checkDoc(p, string(b), recs)
		if err != nil {
			return nil, n, err
		}
		out = append(out, ms...)
		n += k
	}
	return out, n, nil
}

// checkDoc is Check for one doc's text.
func checkDoc(path, doc string, recs *Records) ([]Mismatch, int, error) {
	secs, err := Parse(doc)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	var out []Mismatch
	for _, s := range secs {
		content, err := Render(s.Name, recs)
		if err != nil {
			return nil, 0, fmt.Errorf("%s:%d: %w", path, s.Line, err)
		}
		if want := Body(content, s.Indent); want != s.Body {
			out = append(out, Mismatch{Doc: path, Name: s.Name, Line: s.Line, Have: s.Body, Want: want})
		}
	}
	return out, len(secs), nil
}

// RewriteFiles rewrites the marked sections of the docs at paths from
// recs, writing only the docs that change, and returns how many sections
// it rendered and the docs it wrote. Nothing is written unless every doc
// renders.
func RewriteFiles(paths []string, recs *Records) (sections int, changed []string, err error) {
	outs := make([]string, len(paths))
	olds := make([]string, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, nil, err
		}
		out, n, err := Rewrite(string(b), recs)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", p, err)
		}
		olds[i], outs[i] = string(b), out
		sections += n
	}
	for i, p := range paths {
		if outs[i] == olds[i] {
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			return sections, changed, err
		}
		if err := os.WriteFile(p, []byte(outs[i]), info.Mode().Perm()); err != nil {
			return sections, changed, err
		}
		changed = append(changed, p)
	}
	return sections, changed, nil
}

// Docs returns the Markdown files of the docs directory dir and the
// repository's README.md beside it, when there is one, sorted.
func Docs(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no Markdown files in %s", dir)
	}
	readme := filepath.Join(dir, "..", "README.md")
	if _, err := os.Stat(readme); err == nil {
		paths = append(paths, filepath.Clean(readme))
	}
	sort.Strings(paths)
	return paths, nil
}
