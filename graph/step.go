package graph

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// applyWrites derives the frame that follows f once tasks' writes are
// applied. Writes are applied in a fixed order that depends neither on
// completion nor on registration order: pull tasks by node name, then push
// tasks by Send index. With consume set, the tasks' triggers are used up
// first (a real superstep); without it (command writes) nothing is
// consumed. With own set, the new frame takes over f's spare capacity so
// that appends do not copy; only the run loop, which owns f, sets it.
//
// Reducer functions run under ctx (see field.reduce).
func (r *Runnable[S]) applyWrites(ctx context.Context, f *frame[S], tasks []*task[S], step int, own, consume bool) (*frame[S], error) {
	n := f.derive(own)
	if consume {
		r.consume(n, tasks)
	}
	ordered := tasks
	if len(tasks) > 1 {
		ordered = slices.Clone(tasks)
		sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].before(ordered[j]) })
	}

	var fieldWrites [][]fieldWrite // by field index
	for _, t := range ordered {
		for j, w := range t.writes {
			switch {
			case w.field >= 0:
				if fieldWrites == nil {
					fieldWrites = make([][]fieldWrite, len(r.schema.fields))
				}
				fw := fieldWrite{value: w.value, overwrite: w.overwrite, node: t.name}
				if len(t.encoded) == len(t.writes) { // encodeWrites: one stored write per write
					fw.enc = t.encoded[j].Value
				}
				fieldWrites[w.field] = append(fieldWrites[w.field], fw)
			case w.send != nil:
				n.sends = append(slices.Clip(n.sends), *w.send.(*Send[S]))
				n.markInternal(checkpoint.ChannelSends)
			case w.source != "":
				seen := n.joins[w.channel]
				if !slices.Contains(seen, w.source) {
					seen = append(slices.Clone(seen), w.source)
					slices.Sort(seen)
					n.setJoin(w.channel, seen)
					n.markInternal(w.channel)
				}
			case strings.HasPrefix(w.channel, checkpoint.BranchPrefix):
				n.setTrigger(strings.TrimPrefix(w.channel, checkpoint.BranchPrefix))
				n.markInternal(w.channel)
			}
		}
	}
	if fieldWrites == nil {
		return n, nil
	}
	sv := reflect.ValueOf(&n.state).Elem()
	for i, ws := range fieldWrites {
		if len(ws) == 0 {
			continue
		}
		fl := &r.schema.fields[i]
		cur := sv.Field(fl.index) // aliases the field: read its length before Set
		curLen := 0
		if cur.Kind() == reflect.Slice {
			curLen = cur.Len()
		}
		var spare reflect.Value
		if own {
			spare = n.spare[fl.index]
		}
		nv, pure, err := fl.reduce(ctx, r.abandoned, cur, spare, ws, step)
		if err != nil {
			return nil, err
		}
		if pure {
			if nv.Len() == curLen {
				continue // nothing appended: the channel does not change
			}
			n.setSpare(fl.index, nv)
			sv.Field(fl.index).Set(capped(nv))
			if _, was := n.dirty[fl.name]; !was {
				n.setDirty(fl.name, dirtyMark{from: curLen})
			}
			continue
		}
		delete(n.spare, fl.index)
		sv.Field(fl.index).Set(capped(nv))
		n.setDirty(fl.name, dirtyMark{full: true, enc: fl.taken(ws)})
	}
	return n, nil
}
