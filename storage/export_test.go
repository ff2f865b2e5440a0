package storage

import "testing"

// PlantDefect3 brings issue 19's defect 3 back until t ends: Scan reports
// a checkpoint whose metadata it could not read as damaged.
func PlantDefect3(t testing.TB) {
	plantedDefect3.Store(true)
	t.Cleanup(func() { plantedDefect3.Store(false) })
}
