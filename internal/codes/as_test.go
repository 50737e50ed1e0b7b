package codes

// As walks err's tree as errors.As does (see walk), asking AsOne of each
// error: the tests hold AsOne, which the classifiers ask in their one walk,
// to errors.As through it.
func As[T any](err error, match func(error) (T, bool)) (T, bool) {
	var found T
	ok := walk(err, func(err error) bool {
		e, ok := AsOne(err, match)
		if ok {
			found = e
		}
		return ok
	})
	return found, ok
}
