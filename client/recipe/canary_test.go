package recipe_test

import (
	"testing"

	"github.com/dkv-io/dkv/client/recipe"
)

func TestDecideCanary(t *testing.T) {
	type vs = recipe.VariantStats
	def := recipe.CanaryThresholds{}
	cases := []struct {
		name             string
		baseline, canary vs
		th               recipe.CanaryThresholds
		want             recipe.CanaryDecision
	}{
		{"too few canary requests, canary all errors", vs{10000, 10}, vs{199, 199}, def, recipe.CanaryWait},
		{"no canary requests", vs{10000, 10}, vs{0, 0}, def, recipe.CanaryWait},
		{"baseline with zero errors and fewer than 200 requests, healthy canary", vs{150, 0}, vs{200, 0}, def, recipe.CanaryProceed},
		{"baseline with zero errors and fewer than 200 requests, canary 1% errors", vs{150, 0}, vs{200, 2}, def, recipe.CanaryRollback},
		{"baseline with zero errors, canary 0.4% errors (under the 0.5 point margin)", vs{150, 0}, vs{1000, 4}, def, recipe.CanaryProceed},
		{"baseline with zero errors, canary exactly 0.5 points", vs{150, 0}, vs{1000, 5}, def, recipe.CanaryRollback},
		{"baseline with zero errors, one error in 200 canary requests (0.5 points)", vs{150, 0}, vs{200, 1}, def, recipe.CanaryRollback},
		{"exactly twice the baseline, 0.7 points above", vs{1000, 7}, vs{1000, 14}, def, recipe.CanaryRollback},
		{"baseline with no requests at all, canary 5%", vs{0, 0}, vs{200, 10}, def, recipe.CanaryRollback},
		{"canary twice the baseline and 1 point above", vs{1000, 10}, vs{1000, 20}, def, recipe.CanaryRollback},
		{"canary 1.9x the baseline though 9 points above", vs{1000, 100}, vs{1000, 190}, def, recipe.CanaryProceed},
		{"canary 3x the baseline but only 0.2 points above", vs{10000, 10}, vs{1000, 3}, def, recipe.CanaryProceed},
		{"canary better than baseline", vs{1000, 50}, vs{1000, 10}, def, recipe.CanaryProceed},
		{"custom MinRequests waits", vs{1000, 10}, vs{400, 400}, recipe.CanaryThresholds{MinRequests: 500}, recipe.CanaryWait},
		{"custom Ratio 3 tolerates 2x", vs{1000, 10}, vs{1000, 20}, recipe.CanaryThresholds{Ratio: 3}, recipe.CanaryProceed},
		{"custom margin 2 points tolerates 1 point", vs{1000, 10}, vs{1000, 20}, recipe.CanaryThresholds{MinPointsAbove: 2}, recipe.CanaryProceed},
	}
	for _, tc := range cases {
		if got := recipe.DecideCanary(tc.baseline, tc.canary, tc.th); got != tc.want {
			t.Errorf("%s: baseline %+v canary %+v: got %v, want %v", tc.name, tc.baseline, tc.canary, got, tc.want)
		}
	}
}
