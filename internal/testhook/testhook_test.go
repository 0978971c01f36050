package testhook_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/internal/testhook"
)

func TestWithFrom(t *testing.T) {
	if testhook.From(context.Background()) != nil {
		t.Fatal("a bare context carries a hook")
	}
	var got []string
	ctx := testhook.With(context.Background(), func(p string) { got = append(got, p) })
	derived, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	for _, c := range []context.Context{ctx, derived} {
		fn := testhook.From(c)
		if fn == nil {
			t.Fatal("no hook in a context derived from With's")
		}
		fn("x")
	}
	if d := cmp.Diff([]string{"x", "x"}, got); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	if testhook.From(testhook.With(ctx, nil)) != nil {
		t.Error("With(ctx, nil) left a hook")
	}
}

func TestHit(t *testing.T) {
	testhook.Hit(context.Background(), "nothing") // no hook: nothing happens
	var got []string
	testhook.Hit(testhook.With(context.Background(), func(p string) { got = append(got, p) }), "x")
	if d := cmp.Diff([]string{"x"}, got); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
}
