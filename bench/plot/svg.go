package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
)

// The chart's geometry, in SVG user units.
const (
	width    = 760
	barLeft  = 250 // bars start here; the metric's name is left of it
	barRight = 680 // the longest bar ends here; its value is right of it
	barH     = 16
	lineH    = 22
	margin   = 12
)

type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	NS      string   `xml:"xmlns,attr"`
	Width   int      `xml:"width,attr"`
	Height  int      `xml:"height,attr"`
	ViewBox string   `xml:"viewBox,attr"`
	Font    string   `xml:"font-family,attr"`
	Size    int      `xml:"font-size,attr"`
	Items   []any
}

type svgRect struct {
	XMLName xml.Name `xml:"rect"`
	X       float64  `xml:"x,attr"`
	Y       float64  `xml:"y,attr"`
	W       float64  `xml:"width,attr"`
	H       float64  `xml:"height,attr"`
	Fill    string   `xml:"fill,attr"`
	Title   string   `xml:"title,omitempty"`
}

type svgLine struct {
	XMLName xml.Name `xml:"line"`
	X1      float64  `xml:"x1,attr"`
	Y1      float64  `xml:"y1,attr"`
	X2      float64  `xml:"x2,attr"`
	Y2      float64  `xml:"y2,attr"`
	Stroke  string   `xml:"stroke,attr"`
	Dash    string   `xml:"stroke-dasharray,attr,omitempty"`
}

type svgText struct {
	XMLName xml.Name `xml:"text"`
	X       float64  `xml:"x,attr"`
	Y       float64  `xml:"y,attr"`
	Anchor  string   `xml:"text-anchor,attr,omitempty"`
	Weight  string   `xml:"font-weight,attr,omitempty"`
	Text    string   `xml:",chardata"`
}

// scale is the ratio the longest bar stands for: the largest ratio or 1×,
// whichever is larger, rounded up to a half, so that the line at 1× is
// always inside the chart.
func scale(reports []report) float64 {
	top := 1.0
	for _, r := range reports {
		for _, g := range r.Ratios {
			for _, v := range g.Values {
				top = max(top, v.Ratio)
			}
		}
	}
	return math.Ceil(top*2) / 2
}

// ratioLabel prints a ratio as the benchmarks print it.
func ratioLabel(r float64) string { return fmt.Sprintf("%.2f×", r) }

// writeSVG draws each report as a section: its title (bench, date, load),
// its command, then one group of bars per comparison.
func writeSVG(w io.Writer, reports []report) error {
	top := scale(reports)
	x := func(r float64) float64 { return barLeft + r/top*(barRight-barLeft) }
	var items []any
	y := float64(margin)
	for _, r := range reports {
		y += lineH
		items = append(items, svgText{X: margin, Y: y, Weight: "bold",
			Text: fmt.Sprintf("%s: %s, load average %s before, %s after", r.Bench, r.Date, r.LoadBefore, r.LoadAfter)})
		y += lineH
		items = append(items, svgText{X: margin, Y: y, Text: r.Command})
		sectionTop := y + lineH/2
		for _, g := range r.Ratios {
			y += lineH
			items = append(items, svgText{X: margin, Y: y, Weight: "bold", Text: g.Name})
			for _, v := range g.Values {
				y += lineH
				items = append(items,
					svgText{X: barLeft - 8, Y: y, Anchor: "end", Text: v.Metric},
					svgRect{X: barLeft, Y: y - barH + 4, W: x(v.Ratio) - barLeft, H: barH, Fill: "#4a7ab5",
						Title: g.Name + ", " + v.Metric + ": " + ratioLabel(v.Ratio)},
					svgText{X: x(v.Ratio) + 6, Y: y, Text: ratioLabel(v.Ratio)})
			}
		}
		y += lineH / 2
		items = append(items,
			svgLine{X1: x(1), Y1: sectionTop, X2: x(1), Y2: y, Stroke: "#555", Dash: "4 3"},
			svgText{X: x(1), Y: y + 14, Anchor: "middle", Text: "1×"})
		y += lineH
	}
	height := int(y) + margin
	doc := svgDoc{NS: "http://www.w3.org/2000/svg", Width: width, Height: height,
		ViewBox: fmt.Sprintf("0 0 %d %d", width, height), Font: "sans-serif", Size: 12, Items: items}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", " ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
