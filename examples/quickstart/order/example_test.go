package order_test

import (
	"fmt"

	"github.com/lockstepgo/lockstep/examples/quickstart/order"
)

// The graph compiles without a saver for drawing; lockstep graph THREAD
// prints the same drawing of a thread it ran, from the database.
func ExampleGraph() {
	r, err := order.Graph(nil).Compile()
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
	// 	approve(approve)
	// 	charge(charge)
	// 	price(price)
	// 	__end__([<p>__end__</p>]):::last
	// 	__start__ --> price;
	// 	approve --> charge;
	// 	charge --> __end__;
	// 	price --> approve;
	// 	classDef default fill:#f2f0ff,line-height:1.2
	// 	classDef first fill-opacity:0
	// 	classDef last fill:#bfb6fc
}
