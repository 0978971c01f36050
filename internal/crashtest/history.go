package crashtest

// History is everything the children of one scenario acknowledged, with
// the generation (child) that acknowledged it: the parent's record that
// the checkers hold the database against.
type History struct {
	Checkpoints []CheckpointAck
	Tasks       []TaskAck
	Effects     []EffectAck
	Decisions   []DecisionAck
	// Children counts the results added; Kills counts those killed before
	// they finished, by where they died (Result.KilledAt).
	Children int
	Kills    map[string]int
}

// EffectAck is an acknowledged effect key.
type EffectAck struct {
	Key string
	Gen int
}

// Add records what a child acknowledged.
func (h *History) Add(r *Result) {
	h.Children++
	for _, a := range r.Checkpoints {
		a.Gen = r.Gen
		h.Checkpoints = append(h.Checkpoints, a)
	}
	for _, a := range r.Tasks {
		a.Gen = r.Gen
		h.Tasks = append(h.Tasks, a)
	}
	for _, k := range r.Effects {
		h.Effects = append(h.Effects, EffectAck{Key: k, Gen: r.Gen})
	}
	for _, a := range r.Decisions {
		a.Gen = r.Gen
		h.Decisions = append(h.Decisions, a)
	}
	if r.Killed && !r.Done {
		if h.Kills == nil {
			h.Kills = map[string]int{}
		}
		h.Kills[r.KilledAt()]++
	}
}
