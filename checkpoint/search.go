package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sort"
)

// Searcher is implemented by savers that can search checkpoints across
// threads by metadata: LangGraph's list(None, filter=..., before=...,
// limit=...).
type Searcher interface {
	// Search returns the checkpoints of every thread that opts selects,
	// each as List returns it, newest first: by descending ID (IDs sort in
	// creation order across threads), then by thread and namespace
	// (SortSearch). opts means what it means for List: NS (the root
	// namespace by default) or AllNamespaces, Filter, Before (strictly
	// smaller IDs), Limit (after filtering, across all threads) and
	// MetadataOnly. Pruned checkpoints and deleted threads are not found.
	// It returns an error wrapping ErrInvalid for a bad filter key,
	// ctx's error when ctx is done, and a *CorruptError when stored data
	// cannot be read. The result is not a snapshot across threads: a
	// thread written while Search runs may be read before or after the
	// write, each thread consistently.
	Search(ctx context.Context, opts ListOptions) ([]*Tuple, error)
}

// Search runs opts over every thread of s: s.Search when s is a Searcher;
// otherwise, when s is a ThreadLister, a List of each thread it lists
// (threads with a root-namespace checkpoint), merged in Search's order.
// It returns what Search returns, or an error matching
// errors.ErrUnsupported when s can do neither.
func Search(ctx context.Context, s Saver, opts ListOptions) ([]*Tuple, error) {
	if sr, ok := s.(Searcher); ok {
		return sr.Search(ctx, opts)
	}
	tl, ok := s.(ThreadLister)
	if !ok {
		return nil, fmt.Errorf("checkpoint: %T cannot search across threads (it implements neither checkpoint.Searcher nor checkpoint.ThreadLister): %w", s, errors.ErrUnsupported)
	}
	if err := ValidateFilter(opts.Filter); err != nil {
		return nil, err
	}
	infos, err := tl.Threads(ctx, 0, 0)
	if err != nil {
		return nil, err
	}
	threads := make([]string, len(infos))
	for i, in := range infos {
		threads[i] = in.Thread
	}
	return SearchThreads(ctx, s, threads, opts)
}

// SearchThreads lists each of threads with opts and merges the lists in
// Search's order, cut to opts.Limit: a Searcher built on List (the SQLite
// saver's finds the threads with matching checkpoints first). It returns
// the first error of List.
func SearchThreads(ctx context.Context, s Saver, threads []string, opts ListOptions) ([]*Tuple, error) {
	out := []*Tuple{}
	for _, th := range threads {
		tps, err := s.List(ctx, th, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, tps...)
	}
	return SortSearch(out, opts.Limit), nil
}

// SortSearch sorts tps in Search's order (descending checkpoint ID, then
// thread, then namespace, ascending) and keeps the first limit (all when
// limit is 0 or less). It sorts tps in place and returns it.
func SortSearch(tps []*Tuple, limit int) []*Tuple {
	sort.SliceStable(tps, func(i, j int) bool {
		a, b := tps[i], tps[j]
		if a.Checkpoint.ID != b.Checkpoint.ID {
			return a.Checkpoint.ID > b.Checkpoint.ID
		}
		if a.Thread != b.Thread {
			return a.Thread < b.Thread
		}
		return a.NS < b.NS
	})
	if limit > 0 && len(tps) > limit {
		tps = tps[:limit]
	}
	return tps
}

// ValidateFilter checks the keys of a ListOptions.Filter: it returns an
// error wrapping ErrInvalid naming the first key ValidFilterKey refuses.
func ValidateFilter(filter map[string]any) error {
	for k := range filter {
		if !ValidFilterKey(k) {
			return fmt.Errorf("%w: filter key %q is not [A-Za-z0-9_]{1,64}", ErrInvalid, k)
		}
	}
	return nil
}
