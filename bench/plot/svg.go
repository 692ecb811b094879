package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/svcproxy/svcproxy/bench/report"
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
	Class   string   `xml:"class,attr,omitempty"`
	X       float64  `xml:"x,attr"`
	Y       float64  `xml:"y,attr"`
	W       float64  `xml:"width,attr"`
	H       float64  `xml:"height,attr"`
	Fill    string   `xml:"fill,attr"`
	Title   string   `xml:"title,omitempty"`
}

type svgLine struct {
	XMLName xml.Name `xml:"line"`
	Class   string   `xml:"class,attr,omitempty"`
	X1      float64  `xml:"x1,attr"`
	Y1      float64  `xml:"y1,attr"`
	X2      float64  `xml:"x2,attr"`
	Y2      float64  `xml:"y2,attr"`
	Stroke  string   `xml:"stroke,attr"`
	Dash    string   `xml:"stroke-dasharray,attr,omitempty"`
}

type svgText struct {
	XMLName xml.Name `xml:"text"`
	Class   string   `xml:"class,attr,omitempty"`
	X       float64  `xml:"x,attr"`
	Y       float64  `xml:"y,attr"`
	Anchor  string   `xml:"text-anchor,attr,omitempty"`
	Weight  string   `xml:"font-weight,attr,omitempty"`
	Family  string   `xml:"font-family,attr,omitempty"`
	Size    int      `xml:"font-size,attr,omitempty"`
	Text    string   `xml:",chardata"`
}

// commandWidth is how many characters of a command fit on one line of the
// chart in 10-point monospace (about 6 units each).
const commandWidth = 120

// wrap breaks s at spaces into lines of at most n characters; a word longer
// than n (a -bench pattern can be) is broken every n characters.
func wrap(s string, n int) []string {
	var words []string
	for _, word := range strings.Fields(s) {
		r := []rune(word)
		for len(r) > n {
			words, r = append(words, string(r[:n])), r[n:]
		}
		words = append(words, string(r))
	}
	var lines []string
	line := ""
	for _, word := range words {
		if line != "" && len([]rune(line))+1+len([]rune(word)) > n {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// scale is the ratio the longest bar of a section stands for: its largest
// ratio (with its interval) or 1×, whichever is larger, rounded up to a half,
// so that the line at 1× is always inside the chart. Each report has its own
// scale: a sync compared with one command per rule (tens of times) and a data
// path compared with a hand-written rule (about 1×) would not both be
// readable on one.
func scale(r report.Report) float64 {
	top := 1.0
	for _, g := range r.Ratios {
		for _, v := range g.Values {
			top = max(top, v.Ratio+v.CI95)
		}
	}
	return math.Ceil(top*2) / 2
}

// ratioLabel prints a ratio as the benchmarks print it, with its 95%
// interval when it has one.
func ratioLabel(v report.Ratio) string {
	if v.CI95 > 0 {
		return fmt.Sprintf("%.2f× ± %.2f", v.Ratio, v.CI95)
	}
	return fmt.Sprintf("%.2f×", v.Ratio)
}

// writeSVG draws each report as a section: its title (bench, date, load),
// its command, then one group of bars per comparison, each bar with its 95%
// interval as a whisker where it has one, and a dashed line at 1×.
func writeSVG(w io.Writer, reports []report.Report) error {
	var items []any
	y := float64(margin)
	for _, r := range reports {
		top := scale(r)
		x := func(v float64) float64 { return barLeft + v/top*(barRight-barLeft) }
		y += lineH
		items = append(items, svgText{X: margin, Y: y, Weight: "bold",
			Text: fmt.Sprintf("%s: %s, load average %s before, %s after", r.Bench, r.Date, r.LoadBefore, r.LoadAfter)})
		// The command, in monospace and wrapped: a go test command with its
		// -bench pattern is wider than the chart.
		for _, line := range wrap(r.Command, commandWidth) {
			y += lineH * 3 / 4
			items = append(items, svgText{Class: "command", X: margin, Y: y, Family: "monospace", Size: 10, Text: line})
		}
		sectionTop := y + lineH/2
		for _, g := range r.Ratios {
			y += lineH
			items = append(items, svgText{X: margin, Y: y, Weight: "bold", Text: g.Name})
			for _, v := range g.Values {
				y += lineH
				mid := y - barH/2 + 4
				items = append(items,
					svgText{X: barLeft - 8, Y: y, Anchor: "end", Text: v.Metric},
					svgRect{Class: "bar", X: barLeft, Y: y - barH + 4, W: x(v.Ratio) - barLeft, H: barH, Fill: "#4a7ab5",
						Title: g.Name + ", " + v.Metric + ": " + ratioLabel(v)})
				if v.CI95 > 0 {
					items = append(items, svgLine{Class: "ci", X1: x(max(v.Ratio-v.CI95, 0)), Y1: mid,
						X2: x(v.Ratio + v.CI95), Y2: mid, Stroke: "#222"})
				}
				items = append(items, svgText{X: x(v.Ratio+v.CI95) + 6, Y: y, Text: ratioLabel(v)})
			}
		}
		y += lineH / 2
		items = append(items,
			svgLine{Class: "one", X1: x(1), Y1: sectionTop, X2: x(1), Y2: y, Stroke: "#555", Dash: "4 3"},
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
