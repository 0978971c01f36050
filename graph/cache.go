package graph

import (
	"container/list"
	"sync"
)

// frameCache keeps the decoded latest frame of recently used threads. A
// cached frame is only ever used as a decoding base: a value is taken from it
// when the saver reports the same channel version, and versions are the IDs
// of the checkpoints that wrote them, which are never reused. So the cache
// cannot serve stale state; at worst it misses.
type frameCache[S any] struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[string]*list.Element
}

type cacheEntry[S any] struct {
	thread string // the key (cacheKey)
	f      *frame[S]
}

func newFrameCache[S any](n int) *frameCache[S] {
	return &frameCache[S]{max: n, ll: list.New(), items: map[string]*list.Element{}}
}

// cacheKey is the key of a namespace's frame: the thread's own for the
// root namespace.
func cacheKey(thread, ns string) string {
	if ns == "" {
		return thread
	}
	return thread + "\x00" + ns // thread IDs hold no control character
}

// put stores a copy of f, the head of namespace ns of thread, without its
// spare capacity, which stays with the run that owns it.
func (c *frameCache[S]) put(thread, ns string, f *frame[S]) {
	if c.max <= 0 {
		return
	}
	if f.versionsOwner == versionsOwn {
		f.versionsOwner = versionsShared // cp refers to f's versions map too
	}
	cp := *f
	cp.spare, cp.dirty = nil, nil
	key := cacheKey(thread, ns)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		e.Value.(*cacheEntry[S]).f = &cp
		c.ll.MoveToFront(e)
		return
	}
	c.items[key] = c.ll.PushFront(&cacheEntry[S]{thread: key, f: &cp})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*cacheEntry[S]).thread)
	}
}

// get returns the cached head of namespace ns of thread, or nil.
func (c *frameCache[S]) get(thread, ns string) *frame[S] {
	if c.max <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[cacheKey(thread, ns)]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*cacheEntry[S]).f
	}
	return nil
}
