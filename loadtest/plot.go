package loadtest

import (
	"fmt"
	"image/color"
	"io"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	acceptedColor  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	deliveredColor = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	p50Color       = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	p99Color       = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// WritePNG draws the run over time as a PNG: throughput (events accepted
// and deliveries received per second) above; below, the p50 and p99 of
// each second's publish latency (dashed) and accepted→received latency
// (labelled "accepted to received": the plot's font has no arrow); with
// soak samples, a third panel of table sizes and RSS.
func (r *Report) WritePNG(w io.Writer) error {
	title := "dispatch-load"
	if r.Workload != "" {
		title += " " + r.Workload
	}
	throughput := plot.New()
	throughput.Title.Text = title + ": throughput"
	throughput.X.Label.Text = "seconds since start"
	throughput.Y.Label.Text = "per second"
	throughput.Y.Min = 0
	throughput.Y.Tick.Marker = plainTicks{}
	throughput.Legend.Top = true
	throughput.Add(plotter.NewGrid())
	if err := addLine(throughput, "events accepted/s", acceptedColor, false, r.Timeline, func(s Second) (float64, bool) {
		return float64(s.Accepted), true
	}); err != nil {
		return err
	}
	latency := plot.New()
	latency.Title.Text = "latency"
	latency.X.Label.Text = "seconds since start"
	latency.Y.Label.Text = "ms"
	latency.Y.Min = 0
	latency.Y.Tick.Marker = plainTicks{}
	latency.Legend.Top = true
	latency.Add(plotter.NewGrid())
	lines := []series{
		{"publish p50", p50Color, true, func(s Second) (float64, bool) { return s.PublishP50Ms, s.Accepted > 0 }},
		{"publish p99", p99Color, true, func(s Second) (float64, bool) { return s.PublishP99Ms, s.Accepted > 0 }},
	}
	if r.Deliveries != nil {
		if err := addLine(throughput, "deliveries received/s", deliveredColor, false, r.Timeline, func(s Second) (float64, bool) {
			return float64(s.Delivered), true
		}); err != nil {
			return err
		}
		lines = append(lines,
			series{"accepted to received p50", p50Color, false, func(s Second) (float64, bool) { return s.P50Ms, s.Delivered > 0 }},
			series{"accepted to received p99", p99Color, false, func(s Second) (float64, bool) { return s.P99Ms, s.Delivered > 0 }})
	}
	for _, l := range lines {
		if err := addLine(latency, l.name, l.color, l.dash, r.Timeline, l.value); err != nil {
			return err
		}
	}
	panels := []*plot.Plot{throughput, latency}
	xmax := float64(max(len(r.Timeline), 1))
	if len(r.Samples) > 0 {
		soak, err := r.soakPanel()
		if err != nil {
			return err
		}
		panels = append(panels, soak)
		xmax = max(xmax, r.Samples[len(r.Samples)-1].ElapsedSeconds)
	}
	// The panels share the time axis, to the end of the last second.
	rows := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		p.X.Min, p.X.Max = 0, xmax
		rows[i] = []*plot.Plot{p}
	}

	img := vgimg.New(24*vg.Centimeter, vg.Length(len(panels))*10*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadY: vg.Millimeter * 6}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("write PNG: %w", err)
	}
	return nil
}

// soakPanel draws the samples: each table's size and each Dispatch
// process's RSS, in MiB, at each sample.
func (r *Report) soakPanel() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "soak samples: table sizes and RSS"
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = "MiB"
	p.Y.Min = 0
	p.Y.Tick.Marker = plainTicks{}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var names []string
	values := map[string]plotter.XYs{}
	add := func(name string, at float64, bytes int64) {
		if _, ok := values[name]; !ok {
			names = append(names, name)
		}
		values[name] = append(values[name], plotter.XY{X: at, Y: float64(bytes) / (1 << 20)})
	}
	for _, s := range r.Samples {
		for _, t := range s.Tables {
			add(t.Name, s.ElapsedSeconds, t.Bytes)
		}
		for _, proc := range s.RSS {
			add("RSS "+proc.Name, s.ElapsedSeconds, proc.RSSBytes)
		}
	}
	for i, name := range names {
		line, points, err := plotter.NewLinePoints(values[name])
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", name, err)
		}
		c := plotutil.Color(i)
		line.Color, line.Width = c, vg.Points(1.5)
		points.Color, points.Radius = c, vg.Points(1.5)
		if strings.HasPrefix(name, "RSS ") {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line, points)
		p.Legend.Add(name, line)
	}
	return p, nil
}

// series is one line of the latency panel.
type series struct {
	name  string
	color color.Color
	dash  bool
	value func(Second) (float64, bool)
}

// addLine plots value over the seconds where it is defined; a second
// where it is not breaks the line into separate segments.
func addLine(p *plot.Plot, name string, c color.Color, dashed bool, seconds []Second, value func(Second) (float64, bool)) error {
	var segments []plotter.XYs
	var cur plotter.XYs
	for _, s := range seconds {
		v, ok := value(s)
		if !ok {
			if len(cur) > 0 {
				segments = append(segments, cur)
				cur = nil
			}
			continue
		}
		// Each second's figure is drawn at its middle.
		cur = append(cur, plotter.XY{X: float64(s.T) + 0.5, Y: v})
	}
	if len(cur) > 0 {
		segments = append(segments, cur)
	}
	for i, seg := range segments {
		line, points, err := plotter.NewLinePoints(seg)
		if err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		line.Color, line.Width = c, vg.Points(1.5)
		points.Color, points.Radius = c, vg.Points(1.5)
		if dashed {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line, points)
		if i == 0 {
			p.Legend.Add(name, line)
		}
	}
	return nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros
// (500, not 500.00).
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
	}
	return ticks
}
