package history

import (
	"strings"
	"testing"
	"time"

	"rekey.io/rekey/pkg/issuance"
)

func TestCleanHistory(t *testing.T) {
	w := newWorld(t)
	r := w.check()
	wantClean(t, r)
	if r.UnpublishedSignatures != 1 {
		t.Errorf("UnpublishedSignatures = %d, want 1 (the lost signature of b)", r.UnpublishedSignatures)
	}
	if got := r.OpsByKind[KindCreate]; got[OK] != 3 || got[Unknown] != 1 || got[Failed] != 1 {
		t.Errorf("OpsByKind[Create] = %v, want OK 3, Unknown 1, Failed 1", got)
	}
	if got := r.OpsByKind[KindGet][OK]; got != 5 {
		t.Errorf("OpsByKind[Get][OK] = %d, want 5", got)
	}
	if !r.RecordsComplete || r.RecordsUnchecked != 0 {
		t.Errorf("RecordsComplete = %t, RecordsUnchecked = %d, want true, 0", r.RecordsComplete, r.RecordsUnchecked)
	}
}

func TestAcknowledgedApprovalHasOneCertificate(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("approved request ends without a certificate", func(t *testing.T) {
		w := newWorld(t)
		w.csr("d").Certificate = nil
		wantOnly(t, w.check(), InvAcknowledgedApproval, 1, "request d (uid uid-d)", "op 8 (Approve on replica 1", "holds no certificate")
	})
	t.Run("approved request absent at the end", func(t *testing.T) {
		w := newWorld(t)
		w.final.CSRs = append(w.final.CSRs[:w.finalIdx["d"]], w.final.CSRs[w.finalIdx["d"]+1:]...)
		wantOnly(t, w.check(), InvAcknowledgedApproval, 1, "request d", "absent at the end")
	})
	t.Run("acknowledged NodeClient create ends unapproved and unsigned", func(t *testing.T) {
		w := newWorld(t)
		w.csr("n").Approved, w.csr("n").Failed = false, true
		w.final.Records = w.final.Records[:1] // n's record, and b's lost one: keep it simple
		w.op("getN").Certificate, w.op("nodeN").Certificate = nil, nil
		w.op("getN").Approved, w.op("nodeN").Approved = false, false
		w.csr("n").Certificate = nil
		wantOnly(t, w.check(), InvAcknowledgedApproval, 1, "request n", "NodeClient", "not approved")
	})
	t.Run("a create whose outcome is unknown and never stored is no approval", func(t *testing.T) {
		w := newWorld(t)
		w.addOp(KindCreate, 0, "e", "", Unknown, func(o *Op) { o.Err = "EOF" })
		w.addOp(KindGet, 1, "e", "", Failed, func(o *Op) { o.Reason = "NotFound" })
		wantClean(t, w.check())
	})
}

func TestOneCertificatePerRequest(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("a read saw another certificate than the request holds at the end", func(t *testing.T) {
		w := newWorld(t)
		// b's lost signature was in fact served to a reader.
		w.addOp(KindGet, 2, "b", "uid-b", OK, func(o *Op) {
			o.ResourceVersion = "61"
			o.Approved = true
			o.Certificate = w.unpublished.pem
		})
		wantOnly(t, w.check(), InvOneCertificate, 1, "request b (uid uid-b) had 2 different certificates",
			w.certB.cert.SerialNumber.Text(16), w.unpublished.cert.SerialNumber.Text(16), "the final state", "op 19 (Get on replica 2")
	})
	t.Run("another lifetime of the same name is another request", func(t *testing.T) {
		w := newWorld(t)
		// An earlier lifetime of b, with another UID and certificate (say
		// deleted by hand): not b's second certificate.
		w.addOp(KindGet, 2, "b", "uid-b-old", OK, func(o *Op) {
			o.ResourceVersion = "3"
			o.Approved = true
			o.Certificate = w.unpublished.pem
		})
		w.editRecord("lost", func(r *issuance.Record) { r.CSRUID = "uid-b-old" })
		wantClean(t, w.check())
	})
}

func TestSerialUniquePerCAKey(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("one key issued a serial to two certificates", func(t *testing.T) {
		w := newWorld(t)
		twin := w.k1.sign(t, 0x1b, w.completedAt.Add(20*time.Second)) // b's serial
		w.addOp(KindNodeClient, 0, "m", "uid-m", OK, func(o *Op) { o.Approved = true; o.Certificate = twin.pem })
		w.final.CSRs = append(w.final.CSRs, FinalCSR{Name: "m", UID: "uid-m", Approved: true, Certificate: twin.pem})
		w.addRecord(twin.record("m", "uid-m"))
		wantOnly(t, w.check(), InvSerialUnique, 1, "issued serial 1b to 2 different certificates", "of CA fault", "request b (uid uid-b)", "request m (uid uid-m)")
	})
	t.Run("an unpublished signature reused a published serial", func(t *testing.T) {
		w := newWorld(t)
		twin := w.k1.sign(t, 0x1c, w.completedAt.Add(20*time.Second)) // n's serial
		w.replaceRecord("lost", twin.record("b", "uid-b"))
		wantOnly(t, w.check(), InvSerialUnique, 1, "serial 1c", "the issuance record of request b")
	})
	t.Run("a pruned record reused a published serial", func(t *testing.T) {
		// Only the record history has it: Complete pruned k0's records.
		w := newWorld(t)
		twin := w.k0.sign(t, 0x1a, t0.Add(9*time.Second)) // a's serial
		w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, twin.record("d", "uid-d"))
		wantOnly(t, w.check(), InvSerialUnique, 1, "serial 1a", "the issuance record of request d", "request a (uid uid-a)")
	})
	t.Run("one serial from two keys is two certificates", func(t *testing.T) {
		w := newWorld(t)
		twin := w.k0.sign(t, 0x1b, t0) // b's serial, the other key
		w.addOp(KindGet, 0, "m", "uid-m", OK, func(o *Op) { o.Certificate = twin.pem })
		w.addRecord(twin.record("m", "uid-m"))
		wantClean(t, w.check())
	})
}

func TestNoSignatureByRetiredKey(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("the retired key signed after the rotation completed", func(t *testing.T) {
		w := newWorld(t)
		late := w.k0.sign(t, 0x3d, w.completedAt.Add(10*time.Second))
		w.csr("d").Certificate = late.pem
		w.replaceRecord("d", late.record("d", "uid-d"))
		// k0 is gone from the status at resourceVersion 41 (Completing,
		// previous dropped), seen at completedAt: Tc.
		wantOnly(t, w.check(), InvRetiredKey, 1, "serial 3d", "request d (uid uid-d)", "of CA fault",
			"completed by "+stamp(w.completedAt), "resourceVersion 41 (phase Completing) was seen", "the final state")
	})
	t.Run("an unpublished signature by the retired key", func(t *testing.T) {
		w := newWorld(t)
		late := w.k0.sign(t, 0x3e, w.completedAt.Add(3*time.Second))
		w.replaceRecord("lost", late.record("b", "uid-b"))
		wantOnly(t, w.check(), InvRetiredKey, 1, "issuance record serial 3e", "never published")
	})
	t.Run("a pruned record of a signature by the retired key", func(t *testing.T) {
		// Only the record history has it: Complete pruned it.
		w := newWorld(t)
		late := w.k0.sign(t, 0x3f, w.completedAt.Add(3*time.Second))
		w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, late.record("d", "uid-d"))
		wantOnly(t, w.check(), InvRetiredKey, 1, "issuance record serial 3f", "request d (uid uid-d)", "never published")
	})
	t.Run("signed within the second of completion", func(t *testing.T) {
		w := newWorld(t)
		c := w.k0.sign(t, 0x3d, w.completedAt.Add(900*time.Millisecond))
		w.csr("d").Certificate = c.pem
		w.replaceRecord("d", c.record("d", "uid-d"))
		wantClean(t, w.check())
	})
	t.Run("a NotBefore clamped to the CA's says nothing", func(t *testing.T) {
		w := newWorld(t)
		c := w.k0.signNB(t, 0x3d, w.k0.cert.NotBefore)
		w.csr("d").Certificate = c.pem
		w.replaceRecord("d", c.record("d", "uid-d"))
		wantClean(t, w.check())
	})
	t.Run("a missed Completed status does not put off the retirement", func(t *testing.T) {
		// The observer missed Completed, and the final state says nothing:
		// the Completing status without k0 (resourceVersion 41) retires it.
		w := newWorld(t)
		w.cas = w.cas[:w.obsCompleted]
		w.final.CAs = nil
		late := w.k0.sign(t, 0x3d, w.completedAt.Add(10*time.Second))
		w.csr("d").Certificate = late.pem
		w.replaceRecord("d", late.record("d", "uid-d"))
		wantOnly(t, w.check(), InvRetiredKey, 1, "serial 3d", "completed by "+stamp(w.completedAt), "resourceVersion 41")
	})
	t.Run("lastCompletionTime is no bound", func(t *testing.T) {
		// The observer saw k0 previous last (resourceVersion 40); the next
		// status it saw, a minute later, is Completed. Its
		// lastCompletionTime is earlier than the signature, but the
		// controller takes that time before it destroys the key, so only
		// the sighting bounds the retirement: no violation is provable.
		w := newWorld(t)
		w.cas = append(w.cas[:5:5], obs("fault", "50", "Completed", w.completedAt.Add(time.Minute), w.k1, nil, nil, w.completedAt))
		late := w.k0.sign(t, 0x3d, w.completedAt.Add(10*time.Second))
		w.csr("d").Certificate = late.pem
		w.replaceRecord("d", late.record("d", "uid-d"))
		wantClean(t, w.check())
	})
	t.Run("a later status seen earlier bounds the retirement", func(t *testing.T) {
		// A lagging observer saw resourceVersion 41 late; another saw 50
		// early (no status here has a lastCompletionTime): Tc is the
		// earlier sighting.
		w := newWorld(t)
		w.cas[5].Time = w.completedAt.Add(time.Minute)
		w.cas[6] = obs("fault", "50", "Completed", w.completedAt.Add(2*time.Second), w.k1, nil, nil, time.Time{})
		w.cas = w.cas[:7]
		w.final.CAs[0].LastCompletionTime = time.Time{}
		late := w.k0.sign(t, 0x3d, w.completedAt.Add(10*time.Second))
		w.csr("d").Certificate = late.pem
		w.replaceRecord("d", late.record("d", "uid-d"))
		wantOnly(t, w.check(), InvRetiredKey, 1, "serial 3d", "completed by "+stamp(w.completedAt.Add(2*time.Second)),
			"resourceVersion 50 (phase Completed) was seen")
	})
	t.Run("a key every observation lists is not retired", func(t *testing.T) {
		// The observer's last view has k0 previous, and the final state
		// is unknown: nothing says k0 was destroyed.
		w := newWorld(t)
		w.cas = w.cas[:5]
		w.final.CAs = nil
		late := w.k0.sign(t, 0x3d, w.completedAt.Add(10*time.Second))
		w.csr("d").Certificate = late.pem
		w.replaceRecord("d", late.record("d", "uid-d"))
		wantClean(t, w.check())
	})
}

func TestNoCertificateWhenDenied(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("a denied request holds a certificate", func(t *testing.T) {
		w := newWorld(t)
		c := w.k1.sign(t, 0x4a, w.completedAt.Add(5*time.Second))
		w.csr("x").Certificate = c.pem
		w.final.Records = append(w.final.Records, c.record("x", "uid-x"))
		wantOnly(t, w.check(), InvDenied, 1, "request x (uid uid-x) is denied", "denial acknowledged by op 10", "serial 4a", "the final state")
	})
	t.Run("a denied request was signed (record only)", func(t *testing.T) {
		w := newWorld(t)
		c := w.k1.sign(t, 0x4b, w.completedAt.Add(5*time.Second))
		w.final.Records = append(w.final.Records, c.record("x", "uid-x"))
		wantOnly(t, w.check(), InvDenied, 1, "request x (uid uid-x) is denied", "issuance records serial 4b")
	})
	t.Run("an acknowledged denial does not stick", func(t *testing.T) {
		w := newWorld(t)
		w.csr("x").Denied, w.csr("x").Approved = false, true
		w.op("getX").Denied = false // so only the final state says it
		w.op("getX").AfterWrite = 0
		wantOnly(t, w.check(), InvDenied, 1, "request x (uid uid-x): denial acknowledged by op 10", "not denied")
	})
	t.Run("an unknown denial need not stick", func(t *testing.T) {
		w := newWorld(t)
		w.addOp(KindDeny, 1, "b", "uid-b", Unknown, func(o *Op) { o.Err = "http2: server sent GOAWAY" })
		wantClean(t, w.check())
	})
}

func TestRecordsMatchCertificates(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("a published certificate has no record", func(t *testing.T) {
		w := newWorld(t)
		w.dropRecord("n")
		wantOnly(t, w.check(), InvRecords, 1, "serial 1c", "request n (uid uid-n)", "op 17 (NodeClient", "has no issuance record",
			"none was ever written (the record history is complete)")
	})
	t.Run("a certificate of a retired key has no record", func(t *testing.T) {
		// k0's records were pruned at Complete; the record history says
		// whether a's was ever written: it was not.
		w := newWorld(t)
		w.dropRecord("a")
		r := w.check()
		wantOnly(t, r, InvRecords, 1, "serial 1a", "request a (uid uid-a)", "op 4 (Get", "has no issuance record",
			"none was ever written (the record history is complete)")
		if r.RecordsUnchecked != 0 {
			t.Errorf("RecordsUnchecked = %d, want 0", r.RecordsUnchecked)
		}
	})
	t.Run("an incomplete record history lets a retired key's certificates pass", func(t *testing.T) {
		// The records watch missed events: the records of a and d (key
		// k0, pruned at Complete) cannot be told from never written.
		w := newWorld(t)
		w.incomplete()
		r := w.check()
		wantClean(t, r)
		if r.RecordsComplete || r.RecordsUnchecked != 2 {
			t.Errorf("RecordsComplete = %t, RecordsUnchecked = %d, want false, 2 (a and d)", r.RecordsComplete, r.RecordsUnchecked)
		}
	})
	t.Run("an incomplete record history still wants a live key's records", func(t *testing.T) {
		w := newWorld(t)
		w.incomplete()
		w.dropRecord("n")
		wantOnly(t, w.check(), InvRecords, 1, "serial 1c", "has no issuance record (the record history is incomplete")
	})
	t.Run("a record names another request", func(t *testing.T) {
		w := newWorld(t)
		w.editRecord("n", func(r *issuance.Record) { r.CSRUID = "uid-other" })
		wantOnly(t, w.check(), InvRecords, 1, "the record names request n (uid uid-other)", "seen for n (uid uid-n)")
	})
	t.Run("a pruned record names another request", func(t *testing.T) {
		w := newWorld(t)
		w.editRecord("a", func(r *issuance.Record) { r.CSRName = "b" })
		wantOnly(t, w.check(), InvRecords, 1, "serial 1a", "the record names request b (uid uid-a)", "seen for a (uid uid-a)")
	})
	t.Run("a record names another key", func(t *testing.T) {
		w := newWorld(t)
		w.editRecord("n", func(r *issuance.Record) { r.CAKeyID = w.k0.keyID })
		wantOnly(t, w.check(), InvRecords, 1, "serial 1c", "key ID gen-0")
	})
	t.Run("a record's key ID maps to two keys", func(t *testing.T) {
		w := newWorld(t)
		for i := range w.cas {
			w.cas[i].CurrentKeyID, w.cas[i].NextKeyID, w.cas[i].PreviousKeyID = "", "", ""
		}
		w.final.CAs[0].CurrentKeyID = ""
		// a's record, pruned since, named k1's ID.
		w.editRecord("a", func(r *issuance.Record) { r.CAKeyID = w.k1.keyID })
		wantOnly(t, w.check(), InvRecords, 1, "records naming CA key ID gen-1 describe certificates signed by different keys")
	})
	t.Run("one certificate, two records", func(t *testing.T) {
		w := newWorld(t)
		twin := w.certC.record("n", "uid-n")
		twin.Requester = "someone-else"
		w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, twin)
		wantOnly(t, w.check(), InvRecords, 1, "serial 1c", "2 records hold its SHA-256")
	})
	t.Run("a record put twice alike is one record", func(t *testing.T) {
		w := newWorld(t)
		w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, w.certC.record("n", "uid-n"), w.certA.record("a", "uid-a"))
		r := w.check()
		wantClean(t, r)
		if r.UnpublishedSignatures != 1 {
			t.Errorf("UnpublishedSignatures = %d, want 1", r.UnpublishedSignatures)
		}
	})
	t.Run("an incomplete record history lets expired certificates pass", func(t *testing.T) {
		w := newWorld(t)
		w.incomplete()
		w.dropRecord("n")
		w.final.CAs[0].Time = w.completedAt.Add(3 * time.Hour)
		wantClean(t, w.check())
	})
	t.Run("a complete record history wants expired certificates' records", func(t *testing.T) {
		w := newWorld(t)
		w.dropRecord("n")
		w.final.CAs[0].Time = w.completedAt.Add(3 * time.Hour)
		wantOnly(t, w.check(), InvRecords, 1, "serial 1c", "none was ever written")
	})
	t.Run("unpublished signatures are counted", func(t *testing.T) {
		w := newWorld(t)
		for s := int64(0x50); s < 0x55; s++ {
			w.addRecord(w.k1.sign(t, s, w.completedAt.Add(5*time.Second)).record("b", "uid-b"))
			// Each needs a write that may have signed and lost.
			w.addOp(KindApprove, 0, "b", "uid-b", Unknown, func(o *Op) { o.Err = "EOF" })
		}
		// A pruned one (k0) counts too: its request's create was unknown.
		w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, w.k0.sign(t, 0x56, t0.Add(8*time.Second)).record("d", "uid-d"))
		r := w.check()
		wantClean(t, r)
		if r.UnpublishedSignatures != 7 {
			t.Errorf("UnpublishedSignatures = %d, want 7", r.UnpublishedSignatures)
		}
	})
}

func TestRecordsOfAKeyTheFinalStateDropped(t *testing.T) {
	// The observer saw only the first state, and at the end the next
	// rotation is preparing: the final state alone says k0 is gone, so
	// the records of a and d may have been pruned. Without a complete
	// record history that cannot be told from never written.
	setup := func(t *testing.T) *world {
		w := newWorld(t)
		w.cas = w.cas[:1]
		k2 := newCA(t, "fault", "gen-2", t0)
		w.final.CAs = []CAObservation{obs("fault", "70", "Preparing", w.completedAt.Add(time.Minute), w.k1, k2, nil, w.completedAt)}
		w.final.CAKeys["fault"] = append(w.final.CAKeys["fault"], k2.cert)
		w.addOp(KindRotateStart, 0, "fault", "", OK, nil)
		return w
	}
	t.Run("incomplete record history", func(t *testing.T) {
		w := setup(t)
		w.incomplete()
		r := w.check()
		wantClean(t, r)
		if r.RecordsUnchecked != 2 {
			t.Errorf("RecordsUnchecked = %d, want 2 (a and d)", r.RecordsUnchecked)
		}
	})
	t.Run("complete record history", func(t *testing.T) {
		w := setup(t)
		w.dropRecord("d")
		wantOnly(t, w.check(), InvRecords, 1, "serial 1d", "request d (uid uid-d)", "none was ever written")
	})
}

func TestSignedAtMostOncePerWrite(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("signed twice, every write acknowledged", func(t *testing.T) {
		w := newWorld(t)
		a := w.op("approveB0")
		a.Outcome, a.Err, a.Approved = OK, "", true
		w.carry("approveB", "b")
		wantOnly(t, w.check(), InvSignedOncePerWrite, 1, "request b (uid uid-b) was signed 2 times", "serial 1b", "serial 2b",
			"at most 1 (1 + 0 not acknowledged)", "op 14 (Create on replica 0", "op 15 (Approve on replica 1", "op 16 (Approve on replica 2")
	})
	t.Run("signed again by the controller when no write came back signed", func(t *testing.T) {
		// Every write acknowledged, none carrying the certificate: the
		// approval was stored without it (its signature failed) and the
		// leader's signer controller signed it again.
		w := newWorld(t)
		a := w.op("approveB0")
		a.Outcome, a.Err, a.Approved = OK, "", true
		wantClean(t, w.check())
	})
	t.Run("a failed write may have signed", func(t *testing.T) {
		// A conflict after the signature leaves a record.
		w := newWorld(t)
		a := w.op("approveB0")
		a.Outcome, a.Reason = Failed, "Conflict"
		wantClean(t, w.check())
	})
	t.Run("a pruned record counts", func(t *testing.T) {
		// a was signed twice by k0 with every write acknowledged; Complete
		// pruned both records, the record history has them.
		w := newWorld(t)
		w.carry("approveA", "a")
		w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, w.k0.sign(t, 0x2a, t0.Add(3*time.Second)).record("a", "uid-a"))
		wantOnly(t, w.check(), InvSignedOncePerWrite, 1, "request a (uid uid-a) was signed 2 times", "serial 1a", "serial 2a",
			"op 1 (Create", "op 3 (Approve", "OK")
	})
	t.Run("writes without a UID count for the request of their name", func(t *testing.T) {
		// d's create (unknown) and its retry (refused) carry no UID: with
		// the approval, three signatures are accounted for, not four.
		w := newWorld(t)
		w.carry("approveD", "d")
		for s := int64(0x60); s < 0x62; s++ {
			w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, w.k0.sign(t, s, t0.Add(8*time.Second)).record("d", "uid-d"))
		}
		wantClean(t, w.check())
		w.final.RecordsEverWritten = append(w.final.RecordsEverWritten, w.k0.sign(t, 0x62, t0.Add(8*time.Second)).record("d", "uid-d"))
		wantOnly(t, w.check(), InvSignedOncePerWrite, 1, "request d (uid uid-d) was signed 4 times", "at most 3 (1 + 2 not acknowledged)",
			"op 5 (Create on replica 1", "Unknown", "op 6 (Create on replica 2", "Failed", "op 8 (Approve on replica 1")
	})
	t.Run("writes on another lifetime of the name do not count", func(t *testing.T) {
		w := newWorld(t)
		w.carry("approveB", "b")
		w.addOp(KindApprove, 0, "b", "uid-b-old", Unknown, func(o *Op) { o.Err = "EOF" })
		w.addRecord(w.k1.sign(t, 0x3b, w.completedAt.Add(5*time.Second)).record("b", "uid-b"))
		wantOnly(t, w.check(), InvSignedOncePerWrite, 1, "request b (uid uid-b) was signed 3 times", "at most 2 (1 + 1 not acknowledged)")
	})
	t.Run("denials and reads do not sign", func(t *testing.T) {
		w := newWorld(t)
		w.carry("approveB", "b")
		w.addOp(KindDeny, 0, "b", "uid-b", Unknown, func(o *Op) { o.Err = "EOF" })
		w.addOp(KindGet, 0, "b", "uid-b", Unknown, func(o *Op) { o.Err = "EOF" })
		w.addRecord(w.k1.sign(t, 0x3b, w.completedAt.Add(5*time.Second)).record("b", "uid-b"))
		wantOnly(t, w.check(), InvSignedOncePerWrite, 1, "request b (uid uid-b) was signed 3 times")
	})
}

func TestCAPhaseConsistent(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("phase went back", func(t *testing.T) {
		w := newWorld(t)
		// After Prepared (resourceVersion 30), Preparing again with the
		// old key current.
		w.cas = append(w.cas, obs("fault", "35", "Preparing", w.completedAt, w.k0, w.k1, nil, time.Time{}))
		wantOnly(t, w.check(), InvCAPhase, 1, "CA fault went back", "phase Prepared", "resourceVersion 30", "then phase Preparing", "resourceVersion 35")
	})
	t.Run("completed went back to prepared", func(t *testing.T) {
		w := newWorld(t)
		w.cas = append(w.cas, obs("fault", "55", "Prepared", w.completedAt, w.k1, nil, w.k0, time.Time{}))
		wantOnly(t, w.check(), InvCAPhase, 1, "went back", "resourceVersion 55")
	})
	t.Run("two states at one resourceVersion", func(t *testing.T) {
		w := newWorld(t)
		w.cas = append(w.cas, obs("fault", "30", "Completing", w.completedAt, w.k1, nil, w.k0, time.Time{}))
		wantOnly(t, w.check(), InvCAPhase, 1, "two different states at resourceVersion 30")
	})
	t.Run("skipped phases and a next rotation move forward", func(t *testing.T) {
		w := newWorld(t)
		k2 := newCA(t, "fault", "gen-2", t0)
		later := w.completedAt.Add(time.Minute)
		w.cas = append(w.cas,
			obs("fault", "70", "Preparing", later, w.k1, k2, nil, w.completedAt),
			obs("fault", "80", "Completing", later, k2, nil, w.k1, w.completedAt), // Prepared missed
			obs("fault", "90", "Completed", later, k2, nil, nil, later),
		)
		w.final.CAs = []CAObservation{obs("fault", "90", "Completed", later, k2, nil, nil, later)}
		w.addOp(KindRotateStart, 0, "fault", "", OK, nil)
		w.addOp(KindRotateComplete, 0, "fault", "", OK, nil)
		wantClean(t, w.check())
	})
	t.Run("acknowledged Complete, final phase not Completed", func(t *testing.T) {
		w := newWorld(t)
		// The CA stays Prepared at the end (as last observed).
		w.cas = w.cas[:4]
		w.final.CAs = []CAObservation{w.cas[3]}
		// k0 is not retired then: a's and d's records stay.
		w.final.Records = append(w.final.Records, w.certA.record("a", "uid-a"), w.certD.record("d", "uid-d"))
		wantOnly(t, w.check(), InvCAPhase, 1, "the last rotation action, RotateComplete, was acknowledged by op 13", `phase is "Prepared"`, "want Completed or Completing")
	})
	t.Run("acknowledged Complete, the controller still completing at the end", func(t *testing.T) {
		w := newWorld(t)
		w.cas = w.cas[:w.obsCompleted]
		w.final.CAs = []CAObservation{w.cas[len(w.cas)-1]}
		wantClean(t, w.check())
	})
	t.Run("acknowledged Start, final phase Completed", func(t *testing.T) {
		w := newWorld(t)
		w.addOp(KindRotateStart, 2, "fault", "", OK, nil)
		wantOnly(t, w.check(), InvCAPhase, 1, "RotateStart", `phase is "Completed"`, "want Preparing or Prepared")
	})
	t.Run("an unknown action of the other kind may have gone last", func(t *testing.T) {
		w := newWorld(t)
		w.addOp(KindRotateStart, 2, "fault", "", Unknown, func(o *Op) { o.Err = "context deadline exceeded" })
		w.addOp(KindRotateStart, 1, "fault", "", OK, nil)
		w.addOp(KindRotateComplete, 0, "fault", "", Unknown, func(o *Op) { o.Err = "EOF" })
		wantClean(t, w.check())
	})
	t.Run("refused actions do not count", func(t *testing.T) {
		w := newWorld(t)
		w.addOp(KindRotateStart, 2, "fault", "", Failed, func(o *Op) { o.Reason = "Invalid" })
		wantClean(t, w.check())
	})
}

func TestLinearizableRead(t *testing.T) {
	t.Run("clean", func(t *testing.T) { wantClean(t, newWorld(t).check()) })
	t.Run("not found after an acknowledged create", func(t *testing.T) {
		w := newWorld(t)
		g := w.op("getA")
		g.Outcome, g.Reason, g.Err, g.ResourceVersion, g.UID = Failed, "NotFound", `certificatesigningrequests "a" not found`, "", ""
		wantOnly(t, w.check(), InvLinearizableRead, 1, "read op 2 of a (replica 1", "after write op 1 (Create on replica 0", "not found")
	})
	t.Run("an older resourceVersion", func(t *testing.T) {
		w := newWorld(t)
		w.op("getA").ResourceVersion = "9"
		wantOnly(t, w.check(), InvLinearizableRead, 1, "resourceVersion 9 older than the write's", "resourceVersion 10")
	})
	t.Run("approval not seen", func(t *testing.T) {
		w := newWorld(t)
		g := w.op("getA2")
		g.Approved, g.Certificate = false, nil
		wantOnly(t, w.check(), InvLinearizableRead, 1, "read op 4 of a", "not approved")
	})
	t.Run("denial not seen", func(t *testing.T) {
		w := newWorld(t)
		w.op("getX").Denied = false
		wantOnly(t, w.check(), InvLinearizableRead, 1, "read op 11 of x", "not denied")
	})
	t.Run("certificate not seen", func(t *testing.T) {
		w := newWorld(t)
		w.op("getN").Certificate = nil
		wantOnly(t, w.check(), InvLinearizableRead, 1, "read op 18 of n", "no certificate")
	})
	t.Run("a read refused for another reason says nothing", func(t *testing.T) {
		w := newWorld(t)
		g := w.op("getA")
		g.Outcome, g.Reason, g.ResourceVersion = Failed, "TooManyRequests", ""
		wantClean(t, w.check())
	})
	t.Run("a read that began before the write ended is no read after it", func(t *testing.T) {
		w := newWorld(t)
		g := w.op("getA")
		g.ResourceVersion = "9"
		g.Start = w.op("createA").End.Add(-time.Millisecond)
		wantClean(t, w.check())
	})
	t.Run("a read after an unknown write says nothing", func(t *testing.T) {
		w := newWorld(t)
		w.op("createA").Outcome = Unknown
		w.op("getA").ResourceVersion = "9"
		wantClean(t, w.check())
	})
}

func TestUnparseableCertificate(t *testing.T) {
	w := newWorld(t)
	w.op("getN").Certificate = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	wantOnly(t, w.check(), InvUnparseable, 1, "request n (uid uid-n)", "op 18 (Get on replica 2")
}

func TestReportString(t *testing.T) {
	w := newWorld(t)
	w.csr("d").Certificate = nil
	w.op("getA").ResourceVersion = "9"
	a := w.op("approveB0")
	a.Outcome, a.Err, a.Approved = OK, "", true
	w.carry("approveB", "b")
	s := w.check().String()
	for _, want := range []string{
		"operation", "OK", "Failed", "Unknown", "total",
		"Create", "Approve", "RotateComplete", "all",
		// b's lost signature, and d's, which it no longer holds.
		"unpublished signatures (records of certificates no client saw and no request holds): 2",
		"record history: complete",
		"violations: 3", InvAcknowledgedApproval + ": 1", InvLinearizableRead + ": 1", InvSignedOncePerWrite + ": 1",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report does not say %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, InvDenied) {
		t.Errorf("report names an invariant without violations:\n%s", s)
	}
	t.Logf("\n%s", s)
}

func TestReportStringIncompleteRecords(t *testing.T) {
	w := newWorld(t)
	w.incomplete()
	s := w.check().String()
	want := "record history: INCOMPLETE (the records watch missed events): certificates of retired keys and expired ones were not required to have a record; 2 let pass without one"
	if !strings.Contains(s, want) {
		t.Errorf("report does not say %q:\n%s", want, s)
	}
}

func TestReportStringCapsDetails(t *testing.T) {
	r := Report{OpsByKind: map[Kind]map[Outcome]int{KindGet: {OK: 3}}}
	for i := 0; i < maxDetails+5; i++ {
		r.Violations = append(r.Violations, Violation{InvRecords, "x"})
	}
	s := r.String()
	if !strings.Contains(s, "... and 5 more") || strings.Count(s, "    - x") != maxDetails {
		t.Errorf("report does not cap details at %d:\n%s", maxDetails, s)
	}
}
