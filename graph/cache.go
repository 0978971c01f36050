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
	thread string
	f      *frame[S]
}

func newFrameCache[S any](n int) *frameCache[S] {
	return &frameCache[S]{max: n, ll: list.New(), items: map[string]*list.Element{}}
}

// put stores a copy of f without its spare capacity, which stays with the
// run that owns it.
func (c *frameCache[S]) put(thread string, f *frame[S]) {
	if c.max <= 0 {
		return
	}
	if f.versionsOwner == versionsOwn {
		f.versionsOwner = versionsShared // cp refers to f's versions map too
	}
	cp := *f
	cp.spare, cp.dirty = nil, nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[thread]; ok {
		e.Value.(*cacheEntry[S]).f = &cp
		c.ll.MoveToFront(e)
		return
	}
	c.items[thread] = c.ll.PushFront(&cacheEntry[S]{thread: thread, f: &cp})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*cacheEntry[S]).thread)
	}
}

func (c *frameCache[S]) get(thread string) *frame[S] {
	if c.max <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[thread]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*cacheEntry[S]).f
	}
	return nil
}
