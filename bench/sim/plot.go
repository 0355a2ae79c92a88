package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// PlotSVG draws the sweep's latency percentiles (p50, p90, p99, p99.9; log
// scale) against the achieved throughput as a standalone SVG.
func (r *Report) PlotSVG(w io.Writer, title string) error {
	if len(r.Sweep) == 0 {
		return fmt.Errorf("sim: no sweep points to plot")
	}
	const (
		W, H                 = 720, 420
		left, right, top, bt = 70, 150, 40, 50
	)
	pw, ph := float64(W-left-right), float64(H-top-bt)
	maxX, minY, maxY := 0.0, math.Inf(1), 0.0
	for _, p := range r.Sweep {
		maxX = max(maxX, p.QPS)
		minY = min(minY, max(1, p.P50))
		maxY = max(maxY, p.P999)
	}
	maxX = niceCeil(maxX)
	lo, hi := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(max(maxY, minY*10)))
	x := func(v float64) float64 { return float64(left) + pw*v/maxX }
	y := func(v float64) float64 { return float64(top) + ph*(1-(math.Log10(max(v, 1))-lo)/(hi-lo)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="22" font-size="14">%s</text>`+"\n", left, escapeXML(title))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	for i := 0; i <= 5; i++ {
		v := maxX * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n",
			x(v), top, x(v), float64(top)+ph, x(v), H-bt+18, v)
	}
	for e := lo; e <= hi; e++ {
		v := math.Pow(10, e)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, y(v), float64(left)+pw, y(v), left-6, y(v)+4, usLabel(v))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">achieved queries/s</text>`+"\n", float64(left)+pw/2, H-10)
	fmt.Fprintf(&b, `<text x="16" y="%.0f" transform="rotate(-90 16 %.0f)" text-anchor="middle">latency (log)</text>`+"\n", float64(top)+ph/2, float64(top)+ph/2)
	series := []struct {
		name  string
		color string
		v     func(p SweepPoint) float64
	}{
		{"p50", "#1f77b4", func(p SweepPoint) float64 { return p.P50 }},
		{"p90", "#2ca02c", func(p SweepPoint) float64 { return p.P90 }},
		{"p99", "#ff7f0e", func(p SweepPoint) float64 { return p.P99 }},
		{"p99.9", "#d62728", func(p SweepPoint) float64 { return p.P999 }},
	}
	for i, s := range series {
		var pts []string
		for _, p := range r.Sweep {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.QPS), y(s.v(p))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		for _, p := range r.Sweep {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(p.QPS), y(s.v(p)), s.color)
		}
		ly := top + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			W-right+15, ly, W-right+40, ly, s.color, W-right+46, ly+4, s.name)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
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

func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
