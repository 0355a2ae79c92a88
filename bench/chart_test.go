package bench

import (
	"encoding/xml"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestChartSVG: a log-log chart puts each decade the same distance apart on
// both axes, draws a line and a dot per point for each series, escapes its
// labels, and refuses a series whose X and Y differ in length.
func TestChartSVG(t *testing.T) {
	c := Chart{Title: "a <b>", LogX: true, LogY: true, Series: []Series{
		{Name: "x&y", X: []float64{1e5, 1e6, 1e7}, Y: []float64{10, 100, 1000}},
		{Name: "flat", X: []float64{1e5, 1e7}, Y: []float64{50, 50}},
	}}
	var b strings.Builder
	if err := c.SVG(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Polylines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
		Circles []struct{} `xml:"circle"`
	}
	if err := xml.Unmarshal([]byte(b.String()), &doc); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	if len(doc.Polylines) != 2 || len(doc.Circles) != 5 {
		t.Fatalf("%d lines, %d points; want 2 and 5", len(doc.Polylines), len(doc.Circles))
	}
	var xs, ys []float64
	for _, p := range strings.Fields(doc.Polylines[0].Points) {
		var x, y float64
		if _, err := fmt.Sscanf(p, "%g,%g", &x, &y); err != nil {
			t.Fatal(err)
		}
		xs, ys = append(xs, x), append(ys, y)
	}
	if dx1, dx2 := xs[1]-xs[0], xs[2]-xs[1]; dx1 <= 0 || math.Abs(dx1-dx2) > 0.2 {
		t.Errorf("x decades %.1f and %.1f apart", dx1, dx2)
	}
	if dy1, dy2 := ys[0]-ys[1], ys[1]-ys[2]; dy1 <= 0 || math.Abs(dy1-dy2) > 0.2 {
		t.Errorf("y decades %.1f and %.1f apart (SVG y grows downwards)", dy1, dy2)
	}
	c.Series[1].Y = c.Series[1].Y[:1]
	if err := c.SVG(&b); err == nil {
		t.Error("mismatched series plotted")
	}
	if err := (&Chart{}).SVG(&b); err == nil {
		t.Error("empty chart plotted")
	}
}
