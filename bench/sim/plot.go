package sim

import (
	"fmt"
	"io"

	"github.com/seed-c7a81618/conductor/bench"
)

// PlotSVG draws the sweep's latency percentiles (p50, p90, p99, p99.9; log
// scale) against the achieved throughput as a standalone SVG.
func (r *Report) PlotSVG(w io.Writer, title string) error {
	c, err := r.chart(title)
	if err != nil {
		return err
	}
	return c.SVG(w)
}

// chart is PlotSVG's chart: one series per percentile, a point per sweep rate.
func (r *Report) chart(title string) (*bench.Chart, error) {
	if len(r.Sweep) == 0 {
		return nil, fmt.Errorf("sim: no sweep points to plot")
	}
	c := &bench.Chart{Title: title, XLabel: "achieved queries/s", YLabel: "latency (log)", LogY: true,
		XTick: func(v float64) string { return fmt.Sprintf("%.0f", v) }, YTick: usLabel}
	for _, s := range []struct {
		name string
		v    func(p SweepPoint) float64
	}{
		{"p50", func(p SweepPoint) float64 { return p.P50 }},
		{"p90", func(p SweepPoint) float64 { return p.P90 }},
		{"p99", func(p SweepPoint) float64 { return p.P99 }},
		{"p99.9", func(p SweepPoint) float64 { return p.P999 }},
	} {
		line := bench.Series{Name: s.name}
		for _, p := range r.Sweep {
			// Latencies under 1 µs sit on the axis (the log scale starts at 1).
			line.X, line.Y = append(line.X, p.QPS), append(line.Y, max(1, s.v(p)))
		}
		c.Series = append(c.Series, line)
	}
	return c, nil
}

func usLabel(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.0f s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.0f ms", us/1e3)
	}
	return fmt.Sprintf("%.0f µs", us)
}
