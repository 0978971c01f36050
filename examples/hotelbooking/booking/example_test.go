package booking_test

import (
	"fmt"

	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
)

// The graph: the compliance node in front of the agent's loop. lockstep
// graph hotelbooking prints the same drawing.
func ExampleGraph() {
	g, err := booking.Graph()
	if err != nil {
		panic(err)
	}
	r, err := g.Compile()
	if err != nil {
		panic(err)
	}
	fmt.Print(r.Mermaid())
	// Output:
	// ---
	// config:
	//   flowchart:
	//     curve: linear
	// ---
	// graph TD;
	// 	__start__([<p>__start__</p>]):::first
	// 	compliance(compliance)
	// 	model(model)
	// 	tools(tools)
	// 	__end__([<p>__end__</p>]):::last
	// 	__start__ --> compliance;
	// 	compliance --> model;
	// 	model -.-> __end__;
	// 	model -.-> tools;
	// 	tools --> model;
	// 	classDef default fill:#f2f0ff,line-height:1.2
	// 	classDef first fill-opacity:0
	// 	classDef last fill:#bfb6fc
}
