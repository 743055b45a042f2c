package tenancy

import (
	"fmt"
	"math"
	"strings"
)

// The tables of docs/tenants.md that show the record's figures (package
// docgen's sections tenancy/noisy and tenancy/goodput). They are not
// copies of tenancy.md's tables but digests of them: the noisy
// neighbour's modes as rows, the goodput experiment's sheddable loads as
// columns. Which rows and columns, and their titles, are the doc's
// choice (docgen's); the figures and the offered loads in the headers
// come from the record.

// ModeRow is a row of a docs table: its title and the mode it shows
// (NoisyFIFO, NoisyFair; ModeFIFO, ModeBands, ModeBandsCap).
type ModeRow struct {
	Title string
	Mode  string
}

// RateColumn is a column of the goodput docs table: its title and the
// sheddable load it shows (GoodputRow.SheddableRate).
type RateColumn struct {
	Title string
	Rate  float64
}

// NoisyTable renders the noisy neighbour per mode: the quiet tenant's
// TTFT p50 and p99 and how many of its requests were refused, and the
// noisy tenant's TTFT p50. The header names both tenants' offered loads
// from the runs' configs. A mode missing from the record, or modes run
// at different loads, is an error.
func NoisyTable(rec *Record, rows []ModeRow) (string, error) {
	if len(rows) == 0 {
		return "", fmt.Errorf("tenancy: no rows for the noisy-neighbour table")
	}
	var noisyRate, quietRate float64
	for i, row := range rows {
		cfg, ok := rec.Configs[noisyConfigKey(row.Mode)]
		if !ok {
			return "", fmt.Errorf("tenancy.json has no noisy-neighbour config for mode %q", row.Mode)
		}
		n, okN := cfg.tenant("noisy")
		q, okQ := cfg.tenant("quiet")
		if !okN || !okQ {
			return "", fmt.Errorf("tenancy.json: noisy-neighbour config %q lacks tenant noisy or quiet", row.Mode)
		}
		if i == 0 {
			noisyRate, quietRate = n.Rate, q.Rate
		} else if n.Rate != noisyRate || q.Rate != quietRate {
			return "", fmt.Errorf("tenancy.json: noisy-neighbour mode %q ran at other loads than %q", row.Mode, rows[0].Mode)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| noisy neighbour (noisy %g req/s, quiet %g req/s) | quiet TTFT p50 | quiet TTFT p99 | quiet refused | noisy TTFT p50 |\n", noisyRate, quietRate)
	b.WriteString("|---|---:|---:|---:|---:|\n")
	for _, row := range rows {
		noisy, quiet := rec.noisyRow(row.Mode, "noisy"), rec.noisyRow(row.Mode, "quiet")
		if noisy == nil || quiet == nil {
			return "", fmt.Errorf("tenancy.json has no noisy-neighbour figures for mode %q", row.Mode)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d of %d | %s |\n", row.Title, docTime(quiet.TTFTp50), docTime(quiet.TTFTp99),
			quiet.Refused, quiet.Sent, docTime(noisy.TTFTp50))
	}
	return b.String(), nil
}

// GoodputTable renders the critical tenant's goodput (req/s within its
// SLO) per mode (rows) and sheddable load (columns). The header names
// the critical tenant's offered load and SLO from the runs' configs. A
// cell missing from the record, or cells whose critical tenant differs,
// is an error.
func GoodputTable(rec *Record, rows []ModeRow, cols []RateColumn) (string, error) {
	if len(rows) == 0 || len(cols) == 0 {
		return "", fmt.Errorf("tenancy: no rows or columns for the goodput table")
	}
	var crit Tenant
	for i, row := range rows {
		for j, col := range cols {
			cfg, ok := rec.Configs[goodputConfigKey(row.Mode, col.Rate)]
			if !ok {
				return "", fmt.Errorf("tenancy.json has no goodput config for mode %q at sheddable %g req/s", row.Mode, col.Rate)
			}
			c, ok := cfg.tenant("critical")
			if !ok {
				return "", fmt.Errorf("tenancy.json: goodput config %q at %g req/s has no critical tenant", row.Mode, col.Rate)
			}
			if i == 0 && j == 0 {
				crit = c
			} else if c.Rate != crit.Rate || c.SLO != crit.SLO {
				return "", fmt.Errorf("tenancy.json: goodput config %q at %g req/s offers critical traffic other than the first cell's", row.Mode, col.Rate)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| critical goodput (%g req/s offered, TTFT <= %g s) |", crit.Rate, crit.SLO.Seconds())
	for _, col := range cols {
		fmt.Fprintf(&b, " %s |", col.Title)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(cols)) + "\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s |", row.Title)
		for _, col := range cols {
			g := rec.goodputRow(row.Mode, col.Rate)
			if g == nil {
				return "", fmt.Errorf("tenancy.json has no goodput figures for mode %q at sheddable %g req/s", row.Mode, col.Rate)
			}
			fmt.Fprintf(&b, " %.2f |", g.Goodput)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// tenant returns the config's tenant of that name.
func (c Config) tenant(name string) (Tenant, bool) {
	for _, t := range c.Tenants {
		if t.Name == name {
			return t, true
		}
	}
	return Tenant{}, false
}

// noisyRow returns the noisy-neighbour figures of a tenant in a mode, nil
// if the record has none.
func (rec *Record) noisyRow(mode, tenant string) *NoisyRow {
	for i, r := range rec.Noisy {
		if r.Mode == mode && r.Tenant == tenant {
			return &rec.Noisy[i]
		}
	}
	return nil
}

// goodputRow returns the goodput figures of a mode at a sheddable load,
// nil if the record has none.
func (rec *Record) goodputRow(mode string, shed float64) *GoodputRow {
	for i, r := range rec.Goodput {
		if r.Mode == mode && r.SheddableRate == shed {
			return &rec.Goodput[i]
		}
	}
	return nil
}

// docTime writes a time in ms as the docs do: whole milliseconds below a
// second, else seconds to a tenth.
func docTime(ms float64) string {
	if math.Round(ms) < 1000 {
		return fmt.Sprintf("%.0f ms", ms)
	}
	return fmt.Sprintf("%.1f s", ms/1000)
}
