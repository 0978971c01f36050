package graph

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// frame is the runtime's view of one checkpoint: typed state plus the
// scheduling channels (triggers, join barriers, pending Sends, start input).
// A frame is immutable once built, except that ownership of the spare
// capacity of append fields moves from a frame to the frame derived from it.
type frame[S any] struct {
	thread    string
	ns        string // the namespace of the checkpoint ("" for the root graph)
	id        string
	parentID  string
	createdAt time.Time
	meta      checkpoint.Metadata
	versions  map[string]string
	mark      string

	state S
	// spare holds, per append field, a slice equal to the field's value
	// whose free capacity this frame owns.
	spare map[int]reflect.Value

	triggers map[string]bool     // node → branch:to:<node> is set
	joins    map[string][]string // join channel → sources seen (sorted)
	sends    []Send[S]
	start    *startInput

	// dirty lists the channels changed since the frame's checkpoint was
	// saved: they get blobs in the next Put.
	dirty map[string]dirtyMark

	// chains holds, per append field, the shape of the stored chain of
	// its value (see chainShape), from which the next Put chooses what
	// to store.
	chains map[int]chainShape

	// versionsOwner says who else refers to the versions map.
	versionsOwner versionsOwner
}

// versionsOwner says who else refers to a frame's versions map, so that
// it is copied only when it must be.
type versionsOwner uint8

const (
	// versionsShared: others may read the map (the checkpoint it was
	// saved as, the frame cache); the frame may still change it.
	versionsShared versionsOwner = iota
	// versionsParents: the map is still the parent frame's, to be copied
	// before the first change.
	versionsParents
	// versionsOwn: a copy only this frame refers to (clearInternal made
	// it): encodeFrame turns it into the checkpoint's map instead of
	// copying it once more.
	versionsOwn
)

// startInput is the input waiting in the __start__ channel.
type startInput struct {
	fields map[string]json.RawMessage // field name → encoded value
}

type dirtyMark struct {
	full bool // store the whole value
	from int  // append fields: items before this index are already stored
	// enc, when set, is the new value already encoded: the write it came
	// from as its task stores it (field.taken). encodeFrame stores these
	// bytes, so that a big value a node wrote is encoded once, and the
	// saver sees the write and the channel share one array.
	enc json.RawMessage
}

func newFrame[S any]() *frame[S] {
	return &frame[S]{versions: map[string]string{}}
}

// derive returns a copy of f to build the next frame from. When own is true
// the copy takes over f's spare capacity. Maps are copied lazily: most are
// empty, and versions is shared until the copy changes it.
func (f *frame[S]) derive(own bool) *frame[S] {
	n := &frame[S]{
		thread:        f.thread,
		ns:            f.ns,
		id:            f.id,
		parentID:      f.parentID,
		createdAt:     f.createdAt,
		meta:          f.meta,
		versions:      f.versions,
		versionsOwner: versionsParents,
		mark:          f.mark,
		state:         f.state,
		triggers:      cloneMap(f.triggers),
		joins:         cloneMap(f.joins),
		sends:         f.sends,
		start:         f.start,
		dirty:         cloneMap(f.dirty),
		chains:        cloneMap(f.chains),
	}
	if own {
		n.spare, f.spare = f.spare, nil
		if n.dirty == nil && f.dirty != nil {
			// f's saved and emptied map (markSaved) is reused.
			n.dirty, f.dirty = f.dirty, nil
		}
	}
	if f.versionsOwner == versionsOwn {
		f.versionsOwner = versionsShared // n refers to the map too
	}
	return n
}

// cloneMap copies m, returning nil for an empty map.
func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func (f *frame[S]) setTrigger(node string) {
	if f.triggers == nil {
		f.triggers = map[string]bool{}
	}
	f.triggers[node] = true
}

func (f *frame[S]) setJoin(ch string, seen []string) {
	if f.joins == nil {
		f.joins = map[string][]string{}
	}
	f.joins[ch] = seen
}

func (f *frame[S]) setDirty(ch string, m dirtyMark) {
	if f.dirty == nil {
		f.dirty = map[string]dirtyMark{}
	}
	f.dirty[ch] = m
}

func (f *frame[S]) setChain(i int, c chainShape) {
	if f.chains == nil {
		f.chains = map[int]chainShape{}
	}
	f.chains[i] = c
}

func (f *frame[S]) setSpare(i int, v reflect.Value) {
	if f.spare == nil {
		f.spare = map[int]reflect.Value{}
	}
	f.spare[i] = v
}

// maxVersion is the highest channel version, used for breakpoint marks.
func (f *frame[S]) maxVersion() string {
	m := ""
	for _, v := range f.versions {
		m = max(m, v)
	}
	return m
}

// view returns the state with every slice field capped, as handed to nodes
// and routers. It caps each slice field of the copy in place, through its
// offset: s[:len(s):len(s)] keeps the slice's data pointer and only sets
// its capacity, the same for every element type, so the header is resliced
// as a []byte's. (Through reflect, the copy escaped to the heap and each
// capped slice was boxed: two allocations or more per call, and a step
// makes several calls.)
func (r *Runnable[S]) view(st S) S {
	p := unsafe.Pointer(&st)
	for _, off := range r.schema.sliceAt {
		s := (*[]byte)(unsafe.Add(p, off))
		if len(*s) != cap(*s) {
			*s = (*s)[:len(*s):len(*s)]
		}
	}
	return st
}

// decoded is a decoded channel value; spare, when valid, is an owned slice
// with the same elements and free capacity. For an append field, shape is
// the shape of the chain it was read from.
type decoded struct {
	v     reflect.Value
	spare reflect.Value
	shape chainShape
}

type valueKey struct{ ch, version string }

// decoder turns stored blobs into typed values. It remembers every value it
// built, keyed by channel and version, so that history shares the prefixes
// of append fields instead of decoding them once per snapshot.
type decoder[S any] struct {
	r      *Runnable[S]
	thread string
	values map[valueKey]*decoded
}

func (r *Runnable[S]) newDecoder(thread string) *decoder[S] {
	return &decoder[S]{r: r, thread: thread, values: map[valueKey]*decoded{}}
}

// seed lets the decoder reuse the field values of a frame it can trust
// (the cached latest frame of the thread).
func (d *decoder[S]) seed(f *frame[S]) {
	v := reflect.ValueOf(&f.state).Elem()
	for _, fl := range d.r.schema.fields {
		if ver, ok := f.versions[fl.name]; ok {
			d.values[valueKey{fl.name, ver}] = &decoded{v: capped(v.Field(fl.index)), shape: f.chains[fl.index]}
		}
	}
}

// field decodes the chain of blobs of a state field.
func (d *decoder[S]) field(ctx context.Context, cpID string, fl *field, version string, blobs []checkpoint.Blob) (*decoded, error) {
	if got, ok := d.values[valueKey{fl.name, version}]; ok {
		return got, nil
	}
	corrupt := func(err error) error {
		return decodeFailure(d.thread, cpID, "channel "+fl.name, err, func(err error) error {
			return &checkpoint.CorruptError{Thread: d.thread, Checkpoint: cpID, What: "channel " + fl.name, Err: err}
		})
	}
	if len(blobs) == 0 {
		return nil, corrupt(fmt.Errorf("no data for version %s", version))
	}
	var cur *decoded
	for i, b := range blobs {
		if got, ok := d.values[valueKey{fl.name, b.Version}]; ok {
			cur = got
			continue
		}
		if !b.Append {
			v, err := decodeValue(ctx, d.r.abandoned, fl, b.Data)
			if err != nil {
				return nil, corrupt(err)
			}
			cur = &decoded{v: capped(v)}
			if fl.reducer.kind == kindAppend && v.Kind() == reflect.Slice {
				cur.shape = fullShape(b.Version, v.Len(), len(b.Data))
			}
			d.values[valueKey{fl.name, b.Version}] = cur
			continue
		}
		if fl.typ.Kind() != reflect.Slice {
			return nil, corrupt(fmt.Errorf("append blob for a %s field", fl.typ))
		}
		if cur == nil {
			if b.Base != "" {
				base, ok := d.values[valueKey{fl.name, b.Base}]
				if !ok {
					return nil, corrupt(fmt.Errorf("chain starts at version %s whose base %s is unknown", b.Version, b.Base))
				}
				cur = base
			} else {
				cur = &decoded{v: reflect.Zero(fl.typ), shape: chainShape{known: true}}
			}
		} else if i > 0 && b.Base != blobs[i-1].Version {
			return nil, corrupt(fmt.Errorf("broken chain: %s extends %s, not %s", b.Version, b.Base, blobs[i-1].Version))
		}
		items, err := decodeValue(ctx, d.r.abandoned, fl, b.Data)
		if err != nil {
			return nil, corrupt(err)
		}
		next := &decoded{}
		base := cur.spare
		if !base.IsValid() || base.Len() != cur.v.Len() {
			base = reflect.MakeSlice(fl.typ, cur.v.Len(), growCap(cur.v.Len()+items.Len()))
			reflect.Copy(base, cur.v)
		} else {
			cur.spare = reflect.Value{} // ownership moves to next
		}
		next.spare = reflect.AppendSlice(base, items)
		next.v = capped(next.spare)
		next.shape = cur.shape.extend(b.Version, next.v.Len(), len(b.Data))
		d.values[valueKey{fl.name, b.Version}] = next
		cur = next
	}
	return cur, nil
}

// frame builds the frame of a tuple. When base is the cached frame of the
// same thread, values the tuple left out (GetOptions.Have) come from it.
// With own set, the frame takes over the spare capacity of the append
// values decoded here; only a decoder that builds no further frames may do
// that (history decoders share values between snapshots and must not).
func (d *decoder[S]) frame(ctx context.Context, tp *checkpoint.Tuple, base *frame[S], own bool) (*frame[S], error) {
	cp := &tp.Checkpoint
	// What a saver's Put refuses (an ID before its parent's, a step out
	// of range, a version after the checkpoint, a branch naming no node:
	// each would plan tasks other than the ones its writes belong to)
	// is corrupt, whatever saver returned it.
	if err := checkpoint.VerifyCheckpoint(d.thread, cp); err != nil {
		return nil, err
	}
	f := newFrame[S]()
	f.thread, f.ns = d.thread, tp.NS
	f.id, f.parentID, f.createdAt, f.meta, f.mark = cp.ID, cp.ParentID, cp.CreatedAt, cp.Metadata, cp.Mark
	f.versions = maps.Clone(cp.Versions)
	if f.versions == nil {
		f.versions = map[string]string{}
	}
	if base != nil {
		d.seed(base)
	}
	sv := reflect.ValueOf(&f.state).Elem()
	corrupt := func(ch string, err error) error {
		return decodeFailure(d.thread, cp.ID, "channel "+ch, err, func(err error) error {
			return &checkpoint.CorruptError{Thread: d.thread, Checkpoint: cp.ID, What: "channel " + ch, Err: err}
		})
	}
	for ch, ver := range cp.Versions {
		if i, ok := d.r.schema.byName[ch]; ok {
			fl := &d.r.schema.fields[i]
			dv, err := d.field(ctx, cp.ID, fl, ver, cp.Channels[ch])
			if err != nil {
				return nil, err
			}
			sv.Field(fl.index).Set(dv.v)
			if dv.shape.known {
				f.setChain(fl.index, dv.shape)
			}
			continue
		}
		blobs := cp.Channels[ch]
		if len(blobs) == 0 {
			if base != nil && base.versions[ch] == ver {
				if err := copyInternal(f, base, ch); err != nil {
					return nil, corrupt(ch, err)
				}
				continue
			}
			return nil, corrupt(ch, fmt.Errorf("no data for version %s", ver))
		}
		data := blobs[len(blobs)-1].Data
		if err := d.internal(ctx, f, ch, data); err != nil {
			return nil, corrupt(ch, err)
		}
	}
	if !own {
		return f, nil
	}
	for _, fl := range d.r.schema.fields {
		if ver, ok := f.versions[fl.name]; ok {
			if dv := d.values[valueKey{fl.name, ver}]; dv != nil && dv.spare.IsValid() && dv.spare.Len() == dv.v.Len() {
				f.setSpare(fl.index, dv.spare)
			}
		}
	}
	return f, nil
}

func copyInternal[S any](f, base *frame[S], ch string) error {
	switch {
	case strings.HasPrefix(ch, checkpoint.BranchPrefix):
		f.setTrigger(strings.TrimPrefix(ch, checkpoint.BranchPrefix))
	case strings.HasPrefix(ch, checkpoint.JoinPrefix):
		f.setJoin(ch, base.joins[ch])
	case ch == checkpoint.ChannelSends:
		f.sends = base.sends
	case ch == checkpoint.ChannelStart:
		f.start = base.start
	}
	return nil
}

// internal decodes a scheduling channel into f. Unknown channels (for
// example a state field that was removed from S) are ignored.
func (d *decoder[S]) internal(ctx context.Context, f *frame[S], ch string, data []byte) error {
	switch {
	case strings.HasPrefix(ch, checkpoint.BranchPrefix):
		f.setTrigger(strings.TrimPrefix(ch, checkpoint.BranchPrefix))
	case strings.HasPrefix(ch, checkpoint.JoinPrefix):
		srcs, err := checkpoint.DecodeJoin(data)
		if err != nil {
			return err
		}
		f.setJoin(ch, srcs)
	case ch == checkpoint.ChannelSends:
		raw, err := checkpoint.DecodeSends(data)
		if err != nil {
			return err
		}
		for _, s := range raw {
			arg, err := d.r.decodeFields(ctx, s.Arg)
			if err != nil {
				return err
			}
			f.sends = append(f.sends, Send[S]{Node: s.Node, Arg: arg})
		}
	case ch == checkpoint.ChannelStart:
		fields, err := decodeStart(data)
		if err != nil {
			return err
		}
		f.start = &startInput{fields: fields}
	}
	return nil
}

// startJSON refuses a stored __start__ value that json.Marshal could not
// have written for its type (immutable).
var startJSON = strictjson.For(reflect.TypeFor[map[string]json.RawMessage]())

// decodeStart decodes the __start__ channel: the input, an object from
// field name to value (null when the input set no field).
func decodeStart(data []byte) (map[string]json.RawMessage, error) {
	if err := startJSON.Check(data); err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	err := json.Unmarshal(data, &fields)
	return fields, err
}

// sendJSON is the stored form of a Send: the argument as an object from
// field name to value.
type sendJSON struct {
	Node string                     `json:"node"`
	Arg  map[string]json.RawMessage `json:"arg"`
}

// encodeFields encodes every field of st as an object from field name to
// value (the stored form of Send arguments).
func (r *Runnable[S]) encodeFields(ctx context.Context, st S, what string) (map[string]json.RawMessage, error) {
	v := reflect.ValueOf(&st).Elem()
	out := make(map[string]json.RawMessage, len(r.schema.fields))
	for _, f := range r.schema.fields {
		b, err := encodeValue(ctx, r.abandoned, v.Field(f.index), &f, where{prefix: what + " field", field: f.name}, r.cfg.maxValueBytes)
		if err != nil {
			return nil, err
		}
		out[f.name] = b
	}
	return out, nil
}

// decodeFields is the inverse of encodeFields; missing fields stay zero.
func (r *Runnable[S]) decodeFields(ctx context.Context, m map[string]json.RawMessage) (S, error) {
	var st S
	v := reflect.ValueOf(&st).Elem()
	for name, raw := range m {
		i, ok := r.schema.byName[name]
		if !ok {
			continue
		}
		f := &r.schema.fields[i]
		x, err := decodeValue(ctx, r.abandoned, f, raw)
		if err != nil {
			return st, fmt.Errorf("field %s: %w", name, err)
		}
		v.Field(f.index).Set(x)
	}
	return st, nil
}

// encodeFrame builds the checkpoint for f under the new ID: versions with
// the dirty channels moved to id, and one blob per dirty channel (only the
// new items of an append field). When f owns its versions map (see
// versionsOwn), the checkpoint takes it over and f's map then holds the
// new versions: callers discard a frame whose save failed.
func (r *Runnable[S]) encodeFrame(ctx context.Context, f *frame[S], id string) (checkpoint.Checkpoint, error) {
	cp := checkpoint.Checkpoint{
		ID:        id,
		ParentID:  f.parentID,
		CreatedAt: f.createdAt,
		Metadata:  f.meta,
		Channels:  make(map[string][]checkpoint.Blob, len(f.dirty)),
		Mark:      f.mark,
	}
	sv := reflect.ValueOf(&f.state).Elem()
	// One array holds every channel's blob; each channel gets a slice of
	// one, capped so that an append to it cannot reach its neighbour.
	blobs := make([]checkpoint.Blob, len(f.dirty))
	var shapes map[int]chainShape // the append fields' new chain shapes
	n := 0
	for ch, d := range f.dirty {
		b := &blobs[n]
		b.Version = id
		var err error
		if i, ok := r.schema.byName[ch]; ok {
			fl := &r.schema.fields[i]
			fv := sv.Field(fl.index)
			old := f.versions[ch]
			if fl.reducer.kind == kindAppend && fv.Kind() == reflect.Slice {
				var shape chainShape
				shape, err = r.encodeAppend(ctx, b, fl, fv, d, old, f.chains[fl.index], id)
				if err == nil {
					if shapes == nil {
						shapes = make(map[int]chainShape, len(f.dirty))
					}
					shapes[fl.index] = shape
				}
			} else if d.enc != nil {
				b.Data = d.enc // checked by encodeValue when the write was encoded, under the same cap
			} else {
				b.Data, err = encodeValue(ctx, r.abandoned, fv, fl, where{prefix: "field", field: ch}, r.cfg.maxValueBytes)
			}
		} else {
			b.Data, err = r.encodeInternal(ctx, f, ch)
		}
		if err != nil {
			return cp, err
		}
		cp.Channels[ch] = blobs[n : n+1 : n+1]
		n++
	}
	// The versions change only once every blob is encoded: an encoding
	// error leaves f as it was.
	if f.versionsOwner == versionsOwn {
		cp.Versions, f.versionsOwner = f.versions, versionsShared
	} else {
		cp.Versions = maps.Clone(f.versions)
	}
	for ch := range f.dirty {
		cp.Versions[ch] = id
	}
	if shapes != nil {
		// A new map: the old one may be shared with a cached copy of f.
		chains := make(map[int]chainShape, len(f.chains)+len(shapes))
		maps.Copy(chains, f.chains)
		maps.Copy(chains, shapes)
		f.chains = chains
	}
	return cp, nil
}

var jsonNull = json.RawMessage("null")

func (r *Runnable[S]) encodeInternal(ctx context.Context, f *frame[S], ch string) (json.RawMessage, error) {
	switch {
	case strings.HasPrefix(ch, checkpoint.BranchPrefix):
		return jsonNull, nil
	case strings.HasPrefix(ch, checkpoint.JoinPrefix):
		return json.Marshal(f.joins[ch])
	case ch == checkpoint.ChannelSends:
		out := make([]sendJSON, len(f.sends))
		for i, s := range f.sends {
			arg, err := r.encodeFields(ctx, s.Arg, fmt.Sprintf("send %d to %q", i, s.Node))
			if err != nil {
				return nil, err
			}
			out[i] = sendJSON{Node: s.Node, Arg: arg}
		}
		return json.Marshal(out)
	case ch == checkpoint.ChannelStart:
		if f.start == nil {
			return jsonNull, nil
		}
		return json.Marshal(f.start.fields)
	}
	return nil, fmt.Errorf("graph: no encoder for channel %q", ch)
}

// markSaved records that f was saved as checkpoint cp: dirty channels are
// now stored.
func (f *frame[S]) markSaved(cp *checkpoint.Checkpoint) {
	f.id, f.versions, f.createdAt, f.versionsOwner = cp.ID, cp.Versions, cp.CreatedAt, versionsShared
	clear(f.dirty) // kept for the frame derived from f to reuse
}

// markInternal marks a scheduling channel changed.
func (f *frame[S]) markInternal(ch string) { f.setDirty(ch, dirtyMark{full: true}) }

// clearInternal removes a scheduling channel.
func (f *frame[S]) clearInternal(ch string) {
	if _, ok := f.versions[ch]; ok {
		if f.versionsOwner == versionsParents {
			f.versions, f.versionsOwner = maps.Clone(f.versions), versionsOwn
		}
		delete(f.versions, ch)
	}
	delete(f.dirty, ch)
}

// branchOf returns node's trigger channel, "branch:to:<node>", without
// building the string for a node of the graph.
func (r *Runnable[S]) branchOf(node string) string {
	if ch, ok := r.branchCh[node]; ok {
		return ch
	}
	return checkpoint.BranchPrefix + node
}

// consume clears the triggers that the planned tasks use, as if they ran
// (used when new input discards pending work, and by every applied step).
func (r *Runnable[S]) consume(f *frame[S], tasks []*task[S]) {
	for _, t := range tasks {
		if t.push >= 0 {
			continue
		}
		if t.name == START {
			f.start = nil
			f.clearInternal(checkpoint.ChannelStart)
			continue
		}
		if f.triggers[t.name] {
			delete(f.triggers, t.name)
			f.clearInternal(r.branchOf(t.name))
		}
		for _, j := range r.joinsTo[t.name] {
			if joinComplete(j, f.joins[j.channel]) {
				delete(f.joins, j.channel)
				f.clearInternal(j.channel)
			}
		}
	}
	if len(f.sends) > 0 {
		f.sends = nil
		f.clearInternal(checkpoint.ChannelSends)
	}
}

// orphan returns the first node, in name order, that f's next tasks name
// and the graph does not have (it was removed after the checkpoint was
// saved), or "".
func (r *Runnable[S]) orphan(f *frame[S]) string {
	var names []string
	for name := range f.triggers {
		if r.nodes[name] == nil {
			names = append(names, name)
		}
	}
	for _, s := range f.sends {
		if r.nodes[s.Node] == nil {
			names = append(names, s.Node)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return slices.Min(names)
}

// checkNext refuses to judge or run a thread whose next tasks name a node
// the graph no longer has: planning would leave the task out, and its
// pending work (an interrupt, say) would silently disappear.
func (r *Runnable[S]) checkNext(thread string, f *frame[S]) error {
	if name := r.orphan(f); name != "" {
		return &UnknownNodeError{Name: name, From: fmt.Sprintf(
			"the next tasks of thread %q at checkpoint %s (saved by a graph that had the node; UpdateState, or new input with DiscardPending, moves the thread on)",
			thread, f.id)}
	}
	return nil
}

// dropOrphans clears the triggers of nodes the graph no longer has: the
// tasks that an update or new input replaces.
func (r *Runnable[S]) dropOrphans(f *frame[S]) {
	for name := range f.triggers {
		if r.nodes[name] == nil {
			delete(f.triggers, name)
			f.clearInternal(checkpoint.BranchPrefix + name)
		}
	}
}

func joinComplete(j *joinSpec, seen []string) bool {
	if len(seen) < len(j.sources) {
		return false
	}
	for _, s := range j.sources {
		if !slices.Contains(seen, s) {
			return false
		}
	}
	return true
}
