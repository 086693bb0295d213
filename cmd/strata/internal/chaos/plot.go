package chaos

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// writePlot draws invocation p50 over time, one panel per scenario, the fault window shaded, p50 on a
// log scale (the collapse spans three orders of magnitude): scenario A's ephemeral stream in each run,
// and its durable stream with the sweep off (rows on its commit path) and with the durable route.
func writePlot(path string, res Result) error {
	const w, h = 1200, 900
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	var a, b []line
	var aFault, bFault [2]float64
	for _, r := range res.A {
		a = append(a, line{label: "ephemeral, " + sweepLabel(r.SweepOn, r.DurableRoute), pts: r.series})
		aFault = [2]float64{r.faultFrom, r.faultTo}
	}
	for _, r := range res.A {
		if !r.SweepOn || r.DurableRoute { // the durable stream: registering rows, and swept instead
			a = append(a, line{label: "durable, " + sweepLabel(r.SweepOn, r.DurableRoute), pts: r.durable})
		}
	}
	for _, r := range res.B {
		b = append(b, line{label: "sweep " + r.Mode, pts: r.series})
		bFault = [2]float64{r.faultFrom, r.faultTo}
	}
	panel(img, image.Rect(70, 40, w-30, h/2-40), "Scenario A: latency on the scheduler store (invocation p50)", a, aFault)
	panel(img, image.Rect(70, h/2+40, w-30, h-40), "Scenario B: latency on the shared indexed store (ephemeral invocation p50)", b, bFault)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type line struct {
	label string
	pts   []point
}

var palette = []color.RGBA{{200, 40, 40, 255}, {30, 110, 200, 255}, {40, 150, 60, 255}, {150, 80, 180, 255},
	{230, 140, 20, 255}, {20, 160, 170, 255}}

func panel(img *image.RGBA, r image.Rectangle, title string, lines []line, fault [2]float64) {
	maxX, minY, maxY := 1.0, math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, p := range l.pts {
			maxX = math.Max(maxX, p.x)
			y := math.Log10(math.Max(p.y.Seconds()*1000, 1))
			minY, maxY = math.Min(minY, y), math.Max(maxY, y)
		}
	}
	if math.IsInf(minY, 0) {
		minY, maxY = 0, 1
	}
	minY, maxY = math.Floor(minY), math.Ceil(maxY+0.01)
	px := func(x float64) int { return r.Min.X + int(x/maxX*float64(r.Dx())) }
	py := func(msLog float64) int { return r.Max.Y - int((msLog-minY)/(maxY-minY)*float64(r.Dy())) }

	shade := color.RGBA{235, 225, 200, 255}
	draw.Draw(img, image.Rect(px(fault[0]), r.Min.Y, px(fault[1]), r.Max.Y), &image.Uniform{shade}, image.Point{}, draw.Src)
	label(img, px(fault[0])+4, r.Min.Y+14, "fault", color.RGBA{120, 100, 60, 255})
	grid := color.RGBA{210, 210, 210, 255}
	for d := minY; d <= maxY; d++ {
		y := py(d)
		hline(img, r.Min.X, r.Max.X, y, grid)
		label(img, r.Min.X-62, y+4, msLabel(math.Pow(10, d)), color.Black)
	}
	step := niceStep(maxX)
	for x := 0.0; x <= maxX; x += step {
		vline(img, px(x), r.Min.Y, r.Max.Y, grid)
		label(img, px(x)-8, r.Max.Y+16, time.Duration(x*float64(time.Second)).String(), color.Black)
	}
	hline(img, r.Min.X, r.Max.X, r.Max.Y, color.Black)
	vline(img, r.Min.X, r.Min.Y, r.Max.Y, color.Black)
	label(img, r.Min.X, r.Min.Y-10, title, color.Black)
	for i, l := range lines {
		c := palette[i%len(palette)]
		for j := 1; j < len(l.pts); j++ {
			a, b := l.pts[j-1], l.pts[j]
			segment(img, px(a.x), py(math.Log10(math.Max(a.y.Seconds()*1000, 1))), px(b.x), py(math.Log10(math.Max(b.y.Seconds()*1000, 1))), c)
		}
		hline(img, r.Max.X-250, r.Max.X-230, r.Min.Y+14+i*16-4, c)
		label(img, r.Max.X-225, r.Min.Y+14+i*16, l.label, c)
	}
}

func msLabel(v float64) string {
	if v >= 1000 {
		return time.Duration(v * float64(time.Millisecond)).String()
	}
	return time.Duration(v * float64(time.Millisecond)).Round(time.Millisecond).String()
}

func niceStep(maxX float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120} {
		if maxX/s <= 12 {
			return s
		}
	}
	return 300
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

// segment draws a two-pixel line (Bresenham, thickened).
func segment(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		img.Set(x0, y0+1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
