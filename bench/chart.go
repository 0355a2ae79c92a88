package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"
)

// Chart is a line chart drawn as a standalone SVG: one polyline with a dot
// per point for each series, a legend, and each axis linear (from 0) or
// logarithmic (whole decades around the data).
type Chart struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	// XTick and YTick label an axis value (default %g).
	XTick, YTick func(v float64) string
	Series       []Series
}

// Series is one line of a Chart; X and Y have the same length.
type Series struct {
	Name string
	X, Y []float64
}

var chartColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// axis maps values to [0, 1] along one axis and lists its ticks.
type axis struct {
	log    bool
	lo, hi float64 // linear: the range; log: decades
}

func newAxis(log bool, vals []float64) axis {
	lo, hi := math.Inf(1), 0.0
	for _, v := range vals {
		if log && v <= 0 {
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 1
	}
	if !log {
		return axis{lo: 0, hi: niceCeil(hi)}
	}
	a := axis{log: true, lo: math.Floor(math.Log10(lo)), hi: math.Ceil(math.Log10(hi))}
	if a.hi <= a.lo {
		a.hi = a.lo + 1
	}
	return a
}

func (a axis) frac(v float64) float64 {
	if a.log {
		return (math.Log10(max(v, math.Pow(10, a.lo))) - a.lo) / (a.hi - a.lo)
	}
	return v / a.hi
}

func (a axis) ticks() []float64 {
	var t []float64
	if a.log {
		for e := a.lo; e <= a.hi; e++ {
			t = append(t, math.Pow(10, e))
		}
		return t
	}
	for i := 0; i <= 5; i++ {
		t = append(t, a.hi*float64(i)/5)
	}
	return t
}

// SVG writes the chart. It fails when there is no point to draw or a
// series' X and Y differ in length.
func (c *Chart) SVG(w io.Writer) error {
	var xs, ys []float64
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("bench: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		xs, ys = append(xs, s.X...), append(ys, s.Y...)
	}
	if len(xs) == 0 {
		return fmt.Errorf("bench: no points to plot")
	}
	label := func(f func(float64) string, v float64) string {
		if f != nil {
			return f(v)
		}
		return fmt.Sprintf("%g", v)
	}
	ax, ay := newAxis(c.LogX, xs), newAxis(c.LogY, ys)
	// The margins fit the longest y tick and series name (about 7 px a
	// character at 12 px); the plot is 480 × 330 px.
	const H, top, bt, charW = 420, 40, 50, 7
	left, right := 70, 170
	for _, v := range ay.ticks() {
		left = max(left, charW*utf8.RuneCountInString(label(c.YTick, v))+34)
	}
	for _, s := range c.Series {
		right = max(right, charW*utf8.RuneCountInString(s.Name)+56)
	}
	W := left + 480 + right
	pw, ph := float64(W-left-right), float64(H-top-bt)
	x := func(v float64) float64 { return float64(left) + pw*ax.frac(v) }
	y := func(v float64) float64 { return float64(top) + ph*(1-ay.frac(v)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="22" font-size="14">%s</text>`+"\n", left, escapeXML(c.Title))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	for _, v := range ax.ticks() {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			x(v), top, x(v), float64(top)+ph, x(v), H-bt+18, escapeXML(label(c.XTick, v)))
	}
	for _, v := range ay.ticks() {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, y(v), float64(left)+pw, y(v), left-6, y(v)+4, escapeXML(label(c.YTick, v)))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(left)+pw/2, H-10, escapeXML(c.XLabel))
	fmt.Fprintf(&b, `<text x="16" y="%.0f" transform="rotate(-90 16 %.0f)" text-anchor="middle">%s</text>`+"\n",
		float64(top)+ph/2, float64(top)+ph/2, escapeXML(c.YLabel))
	for i, s := range c.Series {
		color := chartColors[i%len(chartColors)]
		pts := make([]string, len(s.X))
		for j := range s.X {
			pts[j] = fmt.Sprintf("%.1f,%.1f", x(s.X[j]), y(s.Y[j]))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		for j := range s.X {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(s.X[j]), y(s.Y[j]), color)
		}
		ly := top + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			W-right+15, ly, W-right+40, ly, color, W-right+46, ly+4, escapeXML(s.Name))
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

func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
