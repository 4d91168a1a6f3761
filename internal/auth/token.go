package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// claims are what a token carries: the user (sub), the auth revision it
// was issued at, and its expiry.
type claims struct {
	Rev uint64 `json:"rev"`
	jwt.RegisteredClaims
}

// Sign returns an HS256 JWT for user at auth revision rev, valid until exp.
func Sign(key []byte, user string, rev uint64, exp time.Time) (string, error) {
	if len(key) == 0 {
		return "", errors.New("no signing key: auth was never enabled")
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims{Rev: rev, RegisteredClaims: jwt.RegisteredClaims{
		Subject: user, ExpiresAt: jwt.NewNumericDate(exp),
	}}).SignedString(key)
}

// Verify checks tok's signature and expiry at now and returns its user and
// auth revision. The error says what was wrong, for the caller's message.
func Verify(key []byte, tok string, now time.Time) (user string, rev uint64, err error) {
	user, rev, _, err = VerifyExp(key, tok, now)
	return user, rev, err
}

// VerifyExp is Verify that also returns the token's expiry.
func VerifyExp(key []byte, tok string, now time.Time) (user string, rev uint64, exp time.Time, err error) {
	var c claims
	_, err = jwt.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }))
	if err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return "", 0, time.Time{}, errors.New("token expired: authenticate again")
		}
		return "", 0, time.Time{}, fmt.Errorf("invalid token: %v", err)
	}
	if c.Subject == "" {
		return "", 0, time.Time{}, errors.New("invalid token: no user")
	}
	return c.Subject, c.Rev, c.ExpiresAt.Time, nil
}
