// Package openfeature is an OpenFeature provider
// (github.com/open-feature/go-sdk's FeatureProvider) over DKV feature
// flags (recipe.Flags), so applications evaluate DKV flags through the
// standard OpenFeature API, locally and without a round trip.
//
//	flags, err := recipe.NewFlags(ctx, c)
//	...
//	openfeature.SetProviderAndWait(dkvof.New(flags))
//	client := openfeature.NewClient("app")
//	on, _ := client.BooleanValue(ctx, "checkout.new", false, openfeature.NewEvaluationContext("user-42", map[string]any{"country": "NO"}))
//
// The evaluation context's targeting key is the rollout's targeting key;
// its other attributes are matched by the flag's rules (non-string
// values as fmt.Sprint prints them).
package openfeature

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	of "github.com/open-feature/go-sdk/openfeature"
)

// Provider implements of.FeatureProvider over recipe.Flags.
type Provider struct {
	flags *recipe.Flags
}

var _ of.FeatureProvider = (*Provider)(nil)

// New returns a provider evaluating flags. The caller keeps flags open
// for as long as the provider is used and closes it afterwards.
func New(flags *recipe.Flags) *Provider { return &Provider{flags: flags} }

// Metadata names the provider "dkv".
func (p *Provider) Metadata() of.Metadata { return of.Metadata{Name: "dkv"} }

// Hooks: none.
func (p *Provider) Hooks() []of.Hook { return nil }

func (p *Provider) detail(flag string, flat of.FlattenedContext, want recipe.FlagType) (recipe.FlagDetail, of.ProviderResolutionDetail) {
	tk := ""
	attrs := make(map[string]string, len(flat))
	for k, v := range flat {
		if k == of.TargetingKey {
			tk, _ = v.(string)
			continue
		}
		if s, ok := v.(string); ok {
			attrs[k] = s
		} else {
			attrs[k] = fmt.Sprint(v)
		}
	}
	d, err := p.flags.Detail(flag, tk, attrs, want)
	if err != nil {
		return d, of.ProviderResolutionDetail{Reason: of.ErrorReason, ResolutionError: resolutionError(flag, err)}
	}
	return d, of.ProviderResolutionDetail{Reason: of.Reason(d.Reason), Variant: d.Variant}
}

func resolutionError(flag string, err error) of.ResolutionError {
	switch {
	case errors.Is(err, recipe.ErrFlagNotFound), errors.Is(err, client.ErrNotFound):
		return of.NewFlagNotFoundResolutionError("dkv: flag " + flag + " not found")
	case errors.Is(err, recipe.ErrFlagType):
		return of.NewTypeMismatchResolutionError("dkv: flag " + flag + " is of another type")
	case errors.Is(err, client.ErrInvalidInput):
		return of.NewParseErrorResolutionError(err.Error())
	default:
		return of.NewGeneralResolutionError(err.Error())
	}
}

// BooleanEvaluation evaluates a bool flag.
func (p *Provider) BooleanEvaluation(_ context.Context, flag string, def bool, flat of.FlattenedContext) of.BoolResolutionDetail {
	d, r := p.detail(flag, flat, recipe.FlagBool)
	if r.ResolutionError != (of.ResolutionError{}) {
		return of.BoolResolutionDetail{Value: def, ProviderResolutionDetail: r}
	}
	return of.BoolResolutionDetail{Value: d.Bool, ProviderResolutionDetail: r}
}

// StringEvaluation evaluates a string flag.
func (p *Provider) StringEvaluation(_ context.Context, flag string, def string, flat of.FlattenedContext) of.StringResolutionDetail {
	d, r := p.detail(flag, flat, recipe.FlagString)
	if r.ResolutionError != (of.ResolutionError{}) {
		return of.StringResolutionDetail{Value: def, ProviderResolutionDetail: r}
	}
	return of.StringResolutionDetail{Value: d.String, ProviderResolutionDetail: r}
}

// FloatEvaluation evaluates a number flag.
func (p *Provider) FloatEvaluation(_ context.Context, flag string, def float64, flat of.FlattenedContext) of.FloatResolutionDetail {
	d, r := p.detail(flag, flat, recipe.FlagNumber)
	if r.ResolutionError != (of.ResolutionError{}) {
		return of.FloatResolutionDetail{Value: def, ProviderResolutionDetail: r}
	}
	return of.FloatResolutionDetail{Value: d.Number, ProviderResolutionDetail: r}
}

// IntEvaluation evaluates a number flag whose variant is an integer; a
// fractional or out-of-range value is a type mismatch.
func (p *Provider) IntEvaluation(_ context.Context, flag string, def int64, flat of.FlattenedContext) of.IntResolutionDetail {
	d, r := p.detail(flag, flat, recipe.FlagNumber)
	if r.ResolutionError != (of.ResolutionError{}) {
		return of.IntResolutionDetail{Value: def, ProviderResolutionDetail: r}
	}
	if d.Number != math.Trunc(d.Number) || math.Abs(d.Number) > 1<<53 {
		return of.IntResolutionDetail{Value: def, ProviderResolutionDetail: of.ProviderResolutionDetail{
			Reason: of.ErrorReason, ResolutionError: of.NewTypeMismatchResolutionError(fmt.Sprintf("dkv: flag %s: %v is not an integer", flag, d.Number))}}
	}
	return of.IntResolutionDetail{Value: int64(d.Number), ProviderResolutionDetail: r}
}

// ObjectEvaluation evaluates a json flag (the decoded value is shared:
// do not modify it).
func (p *Provider) ObjectEvaluation(_ context.Context, flag string, def any, flat of.FlattenedContext) of.InterfaceResolutionDetail {
	d, r := p.detail(flag, flat, recipe.FlagJSON)
	if r.ResolutionError != (of.ResolutionError{}) {
		return of.InterfaceResolutionDetail{Value: def, ProviderResolutionDetail: r}
	}
	return of.InterfaceResolutionDetail{Value: d.JSON, ProviderResolutionDetail: r}
}
