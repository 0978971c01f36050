package graph

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

type codecItem struct {
	ID    string
	Score float64
	Tags  []string
}

type codecState struct {
	Name   string
	N      int64
	Ratio  float64
	OK     bool
	Ptr    *codecItem
	Items  []codecItem       `lockstep:"append"`
	Notes  []string          `lockstep:"append"`
	Meta   map[string]string `lockstep:"merge"`
	Raw    json.RawMessage
	Nested map[string][]int
}

// FuzzStateCodec checks the state codec round trip: a sequence of steps
// (appends, replacements, merges, overwrites) is encoded as delta blobs the
// way the runtime saves them, decoded back from the chains, and must equal
// the state the steps produced, at every step.
func FuzzStateCodec(f *testing.F) {
	f.Add("alpha", int64(7), 0.5, []byte{1, 2, 3, 250, 9}, `{"x":[1,2]}`)
	f.Add("", int64(-1), math.Copysign(0, -1), []byte{0}, `null`)
	f.Add("ü\u2028\x00", int64(1<<62), 1e308, []byte{255, 255, 3, 3, 3, 3}, `[]`)
	f.Fuzz(func(t *testing.T, name string, n int64, ratio float64, ops []byte, raw string) {
		if !json.Valid([]byte(raw)) || ratio != ratio || ratio > 1e308 || ratio < -1e308 {
			return // not encodable state: the runtime refuses it earlier
		}
		g := New[codecState]().AddNode("a", func(ctx context.Context, s codecState) (Update[codecState], error) { return Update[codecState]{}, nil }).AddEdge(START, "a")
		r, err := g.Compile()
		if err != nil {
			t.Fatal(err)
		}
		blobs := map[string]map[string]checkpoint.Blob{} // channel → version → blob
		f := newFrame[codecState]()
		prev := ""
		for i, op := range ops {
			if i > 24 {
				break
			}
			var u Update[codecState]
			switch op % 6 {
			case 0:
				u = Set(codecState{Name: name, N: n + int64(i), Ratio: ratio, OK: i%2 == 0, Raw: json.RawMessage(raw)}, "Name", "N", "Ratio", "OK", "Raw")
			case 1:
				u = Set(codecState{Items: []codecItem{{ID: name, Score: ratio, Tags: []string{name}}}}, "Items")
			case 2:
				u = Set(codecState{Notes: []string{name, string(rune('a' + i%26))}}, "Notes")
			case 3:
				u = Set(codecState{Meta: map[string]string{name: "v", "k": name}}, "Meta")
			case 4:
				u = Set(codecState{Notes: []string{"reset"}}).Overwrite("Notes")
			case 5:
				u = Set(codecState{Ptr: &codecItem{ID: name}, Nested: map[string][]int{name: {int(op)}}}, "Ptr", "Nested")
			}
			tk := &task[codecState]{name: "a", push: -1}
			tk.writes, err = r.resolve(t.Context(), tk, u, f, false)
			if err != nil {
				t.Fatal(err)
			}
			nf, err := r.applyWrites(context.Background(), f, []*task[codecState]{tk}, i, true, false)
			if err != nil {
				t.Fatal(err)
			}
			id := checkpoint.NewIDGenerator(nil, nil).Next(prev)
			nf.parentID = prev
			cp, err := r.encodeFrame(context.Background(), nf, id)
			if errors.Is(err, ErrNotSerializable) && (!utf8.ValidString(name) || rawRefused(raw)) {
				return // refused, as it must be: JSON cannot carry it, or could not read it back
			}
			if err != nil {
				t.Fatal(err)
			}
			for ch, bs := range cp.Channels {
				if blobs[ch] == nil {
					blobs[ch] = map[string]checkpoint.Blob{}
				}
				blobs[ch][id] = bs[0]
			}
			nf.markSaved(&cp)
			f, prev = nf, id

			// Rebuild the tuple as a saver would and decode it.
			tp := &checkpoint.Tuple{Thread: "t", Checkpoint: cp}
			tp.Checkpoint.Channels = map[string][]checkpoint.Blob{}
			for ch, v := range cp.Versions {
				var chain []checkpoint.Blob
				for ver := v; ; {
					b := blobs[ch][ver]
					chain = append([]checkpoint.Blob{b}, chain...)
					if !b.Append || b.Base == "" {
						break
					}
					ver = b.Base
				}
				tp.Checkpoint.Channels[ch] = chain
			}
			got, err := r.newDecoder("t").frame(context.Background(), tp, nil, false)
			if err != nil {
				t.Fatalf("step %d: decode: %v", i, err)
			}
			if diff := cmp.Diff(f.state, got.state, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(codecState{}, "Raw")); diff != "" {
				t.Fatalf("step %d (op %d): decoded state differs (-saved +decoded):\n%s", i, op%6, diff)
			}
			if !rawEqual(f.state.Raw, got.state.Raw) {
				t.Fatalf("step %d: Raw %s decoded as %s", i, f.state.Raw, got.state.Raw)
			}
		}
	})
}

func rawEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}

// rawRefused reports whether the strict decoder refuses raw as a
// json.RawMessage (invalid UTF-8 or a duplicate key inside): the runtime
// then refuses to write it.
func rawRefused(raw string) bool {
	return strictjson.For(reflect.TypeFor[json.RawMessage]()).Check([]byte(raw)) != nil
}
