package checkpoint

import (
	"fmt"
	"strings"
)

// Namespaces. A thread's root graph saves its checkpoints in the namespace
// "" ([Ref.NS]); a subgraph saves its own under the namespace of the task
// that runs it: "<node>:<task ID>" for a task of the root graph, and the
// parent task's namespace, "|", and "<node>:<task ID>" deeper down
// ("review:<id>|billing:<id>"), as LangGraph's checkpoint_ns. Each
// namespace has its own head, history and pending writes; one lease
// covers every namespace of a thread (see Saver), and DeleteThread,
// Prune and the listings treat a thread's namespaces together.
const (
	// NSSeparator separates the levels of a nested namespace.
	NSSeparator = "|"
	// NSTaskSeparator separates a level's node name from its task ID.
	NSTaskSeparator = ":"
)

// TaskNS returns the namespace of the subgraph that task taskID of node
// runs, in a graph whose own namespace is parent.
func TaskNS(parent, node, taskID string) string {
	ns := node + NSTaskSeparator + taskID
	if parent == "" {
		return ns
	}
	return parent + NSSeparator + ns
}

// NestedIn reports whether namespace ns lies strictly below namespace
// parent: a subgraph's namespace, at any depth, of a graph whose
// namespace is parent. Every namespace but "" lies below "".
func NestedIn(ns, parent string) bool {
	if parent == "" {
		return ns != ""
	}
	return strings.HasPrefix(ns, parent+NSSeparator)
}

// ParentNS returns the namespace of the graph that runs the subgraph of
// namespace ns ("" for a namespace one level down, and for "").
func ParentNS(ns string) string {
	i := strings.LastIndex(ns, NSSeparator)
	if i < 0 {
		return ""
	}
	return ns[:i]
}

// NSLevel is one level of a namespace: the node that runs the subgraph and
// the ID of its task.
type NSLevel struct {
	Node   string
	TaskID string
}

// SplitNS returns the levels of namespace ns, outermost first (none for
// ""). It returns an error wrapping ErrInvalid when a level is not
// "<node>:<task ID>" with both parts non-empty.
func SplitNS(ns string) ([]NSLevel, error) {
	if ns == "" {
		return nil, nil
	}
	parts := strings.Split(ns, NSSeparator)
	out := make([]NSLevel, len(parts))
	for i, p := range parts {
		node, task, ok := strings.Cut(p, NSTaskSeparator)
		if !ok || node == "" || task == "" {
			return nil, fmt.Errorf("%w: namespace %q: level %q is not <node>:<task ID>", ErrInvalid, ns, p)
		}
		out[i] = NSLevel{Node: node, TaskID: task}
	}
	return out, nil
}

// NSPath returns the node names of namespace ns, outermost first, without
// the task IDs ("review|billing" for "review:<id>|billing:<id>"; "" for
// ""): what LangGraph's recast_checkpoint_ns returns. A level without a
// task ID is kept as it is.
func NSPath(ns string) string {
	if ns == "" {
		return ""
	}
	parts := strings.Split(ns, NSSeparator)
	for i, p := range parts {
		parts[i], _, _ = strings.Cut(p, NSTaskSeparator)
	}
	return strings.Join(parts, NSSeparator)
}
