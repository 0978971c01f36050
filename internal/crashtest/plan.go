package crashtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidPlan is matched by the errors of ParsePlan and PlanSpace.Draw.
var ErrInvalidPlan = errors.New("crashtest: invalid plan")

// Plan says how a child process dies: at the Occurrence-th hit of Point
// (the child kills itself there), or after Delay (the parent kills it), or
// not at all (the zero Plan). A child whose plan's point is not hit that
// often, or that finishes before the delay, exits normally.
type Plan struct {
	Point      Point
	Occurrence int // from 1
	Delay      time.Duration
}

// IsZero reports whether p kills nothing.
func (p Plan) IsZero() bool { return p == Plan{} }

// String is the plan's text form, which ParsePlan reads back:
// "point@occurrence", "delay=duration" or "none".
func (p Plan) String() string {
	switch {
	case p.Point != "":
		return string(p.Point) + "@" + strconv.Itoa(p.Occurrence)
	case p.Delay > 0:
		return "delay=" + p.Delay.String()
	}
	return "none"
}

// Validate checks that p names a known point with a positive occurrence,
// or a positive delay, or nothing. It returns an error matching
// ErrInvalidPlan.
func (p Plan) Validate() error {
	switch {
	case p.IsZero():
		return nil
	case p.Point != "" && p.Delay != 0:
		return fmt.Errorf("%w: %s: a point and a delay", ErrInvalidPlan, p)
	case p.Point != "" && !Known(p.Point):
		return fmt.Errorf("%w: unknown point %q", ErrInvalidPlan, p.Point)
	case p.Point != "" && p.Occurrence < 1:
		return fmt.Errorf("%w: occurrence %d of %s (want 1 or more)", ErrInvalidPlan, p.Occurrence, p.Point)
	case p.Point == "" && p.Delay < 0:
		return fmt.Errorf("%w: negative delay %v", ErrInvalidPlan, p.Delay)
	case p.Point == "" && p.Occurrence != 0:
		return fmt.Errorf("%w: an occurrence without a point", ErrInvalidPlan)
	}
	return nil
}

// ParsePlan reads a plan in the form Plan.String writes ("" means none).
// It returns an error matching ErrInvalidPlan.
func ParsePlan(s string) (Plan, error) {
	switch {
	case s == "" || s == "none":
		return Plan{}, nil
	case strings.HasPrefix(s, "delay="):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "delay="))
		if err != nil || d <= 0 {
			return Plan{}, fmt.Errorf("%w: %q: want delay=<positive duration>", ErrInvalidPlan, s)
		}
		return Plan{Delay: d}, nil
	}
	pt, occ, ok := strings.Cut(s, "@")
	n, err := strconv.Atoi(occ)
	if !ok || err != nil {
		return Plan{}, fmt.Errorf("%w: %q: want point@occurrence", ErrInvalidPlan, s)
	}
	p := Plan{Point: Point(pt), Occurrence: n}
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// PlanSpace is what random plans are drawn from: a point, uniformly from
// Points, at an occurrence drawn uniformly from 1 to MaxOccurrence[point]
// (1 when unset); or, with probability DelayShare, a delay drawn uniformly
// from [MinDelay, MaxDelay).
type PlanSpace struct {
	Points        []Point
	MaxOccurrence map[Point]int
	DelayShare    float64
	MinDelay      time.Duration
	MaxDelay      time.Duration
}

// Draw returns a plan drawn from ps with r. The same r state gives the
// same plan. It returns an error matching ErrInvalidPlan when ps is empty
// or inconsistent.
func (ps PlanSpace) Draw(r *rand.Rand) (Plan, error) {
	if len(ps.Points) == 0 && ps.DelayShare <= 0 {
		return Plan{}, fmt.Errorf("%w: an empty plan space", ErrInvalidPlan)
	}
	if ps.DelayShare > 0 && (ps.MinDelay <= 0 || ps.MaxDelay <= ps.MinDelay) {
		return Plan{}, fmt.Errorf("%w: delays [%v, %v)", ErrInvalidPlan, ps.MinDelay, ps.MaxDelay)
	}
	if len(ps.Points) == 0 || r.Float64() < ps.DelayShare {
		d := ps.MinDelay + time.Duration(r.Int64N(int64(ps.MaxDelay-ps.MinDelay)))
		return Plan{Delay: d}, nil
	}
	pt := ps.Points[r.IntN(len(ps.Points))]
	max := max(ps.MaxOccurrence[pt], 1)
	p := Plan{Point: pt, Occurrence: 1 + r.IntN(max)}
	return p, p.Validate()
}
