// Package gorillastore is a github.com/gorilla/sessions store on DKV:
// the cookie carries only the session's id (signed, and encrypted if
// given an encryption key, by securecookie), the values live in a
// recipe.SessionStore that every instance of a web service shares, and
// a session expires with its lease.
//
// It is its own Go module, so DKV's client does not depend on gorilla.
package gorillastore

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/gob"
	"net/http"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
)

// DefaultMaxAge is the cookie's and the stored session's lifetime unless
// Options says otherwise: 30 days, as gorilla's own stores.
const DefaultMaxAge = 86400 * 30

// Store is a gorilla/sessions Store on a recipe.SessionStore.
type Store struct {
	s *recipe.SessionStore
	// Codecs sign (and encrypt) the session id in the cookie.
	Codecs []securecookie.Codec
	// Options are the cookie options of new sessions.
	Options *sessions.Options
}

// New returns a store on s; keyPairs are securecookie's hash and
// (optional) encryption keys, as for gorilla's CookieStore.
func New(s *recipe.SessionStore, keyPairs ...[]byte) *Store {
	return &Store{
		s:       s,
		Codecs:  securecookie.CodecsFromPairs(keyPairs...),
		Options: &sessions.Options{Path: "/", MaxAge: DefaultMaxAge, HttpOnly: true},
	}
}

// Get returns the named session of the request, cached per request.
func (st *Store) Get(r *http.Request, name string) (*sessions.Session, error) {
	return sessions.GetRegistry(r).Get(st, name)
}

// New loads the named session from the request's cookie, or returns a
// new one (IsNew) if there is none or it expired. A cookie that fails
// verification yields a new session and the error.
func (st *Store) New(r *http.Request, name string) (*sessions.Session, error) {
	session := sessions.NewSession(st, name)
	opts := *st.Options
	session.Options = &opts
	session.IsNew = true
	c, err := r.Cookie(name)
	if err != nil {
		return session, nil
	}
	var id string
	if err := securecookie.DecodeMulti(name, c.Value, &id, st.Codecs...); err != nil {
		return session, err
	}
	data, found, err := st.s.Get(r.Context(), id)
	if err != nil || !found {
		return session, err
	}
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&session.Values); err != nil {
		return session, err
	}
	session.ID = id
	session.IsNew = false
	return session, nil
}

// Save writes the session to DKV and its id to the cookie; a negative
// MaxAge deletes it.
func (st *Store) Save(r *http.Request, w http.ResponseWriter, session *sessions.Session) error {
	if session.Options.MaxAge < 0 {
		if session.ID != "" {
			if err := st.s.Delete(r.Context(), session.ID); err != nil {
				return err
			}
		}
		http.SetCookie(w, sessions.NewCookie(session.Name(), "", session.Options))
		return nil
	}
	if session.ID == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		session.ID = strings.TrimRight(base32.StdEncoding.EncodeToString(b), "=")
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(session.Values); err != nil {
		return err
	}
	age := session.Options.MaxAge
	if age == 0 { // a browser-session cookie: keep the data the default time
		age = DefaultMaxAge
	}
	if err := st.s.Put(r.Context(), session.ID, buf.Bytes(), time.Duration(max(age, 1))*time.Second); err != nil {
		return err
	}
	encoded, err := securecookie.EncodeMulti(session.Name(), session.ID, st.Codecs...)
	if err != nil {
		return err
	}
	http.SetCookie(w, sessions.NewCookie(session.Name(), encoded, session.Options))
	return nil
}
