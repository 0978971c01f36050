package graph

// hiddenEvent reports whether e is about the hidden __start__ task, which,
// as in LangGraph (where __start__ is tagged hidden), streams no update,
// task or task result event: the input shows in the first values event
// after the start step instead.
func hiddenEvent[S any](e Event[S]) bool {
	if e.Node != START {
		return false
	}
	switch e.Kind {
	case EventUpdates, EventTask, EventTaskResult:
		return true
	}
	return false
}
