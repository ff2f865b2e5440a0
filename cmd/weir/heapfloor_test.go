package main

import "testing"

func TestHeapFloorOnlyWhenTheEnvironmentDoesNotTuneTheCollector(t *testing.T) {
	defer func() { ballast = nil }()
	for _, c := range []struct {
		env  map[string]string
		want int
	}{
		{nil, heapFloorBytes},
		{map[string]string{"GOGC": "400"}, 0},
		{map[string]string{"GOGC": "off"}, 0},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, 0},
	} {
		ballast = nil
		if got := setHeapFloor(func(k string) string { return c.env[k] }); got != c.want || len(ballast) != c.want {
			t.Errorf("environment %v: floor %d (ballast %d bytes); want %d", c.env, got, len(ballast), c.want)
		}
	}
}
