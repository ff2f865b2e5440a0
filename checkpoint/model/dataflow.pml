/*
 * dataflow.pml: Weir's checkpoint protocol over a small dataflow, for SPIN.
 *
 *   source 0 --channel 0--\
 *                          consumer: counts every record (keyed state),
 *   source 1 --channel 1--/  aligns barriers, writes every record to a
 *                            two-phase-commit sink (chained in its task)
 *
 * Three tasks, two channels, R records per source, checkpoint ids 1..MAXCK,
 * up to MAXCONC checkpoints in flight, up to MAXFAULTS faults (a process
 * crash with failover to the newest durable checkpoint, a timeout, a
 * source's decline, a failed metadata write). README.md maps every action
 * to the Go function it models; docs/design-notes.md note 91 says what is
 * abstracted away.
 *
 * The alignment: -DMODE=1 (exactly-once, aligned), 2 (at-least-once), 3
 * (unaligned, FLIP-76) or 4 (aligned with the aligned-checkpoint timeout,
 * which may switch an alignment to unaligned at any moment); without
 * -DMODE, one run checks each of them (init chooses). Planted bugs:
 * -DBUG_FORWARD, -DBUG_EAGER, -DBUG_ABORT_DROPS_OLDER, -DBUG_BARRIER_BEHIND,
 * -DBUG_FINAL_FLAG_ONCE, -DBUG_STAYS_BLOCKED (see README.md).
 *
 * Safety (assertions): the completed checkpoint is a consistent cut
 * (exactly-once modes); no alignment or channel-state persistence ends
 * without the coordinator being told; a committed record is never
 * committed twice (exactly-once modes); at the end of the job every
 * record's effect on state and on committed output is there exactly once
 * (at least once in at-least-once mode) and no transaction stays open;
 * a task told the job ends has seen its input end.
 * Liveness (ltl done, with -DMAXFAULTS=0): the job ends, so the final
 * checkpoint completes.
 */

#define ALIGNED   1
#define ATLEAST   2
#define UNALIGNED 3
#define TIMEOUT   4

#ifndef R
#define R 2            /* records per source */
#endif
#ifndef MAXCK
#define MAXCK 3        /* checkpoint ids 1..MAXCK, the final one included */
#endif
#ifndef MAXCONC
#define MAXCONC 2      /* checkpoint.Config.MaxConcurrent */
#endif
#ifndef MAXFAULTS
#define MAXFAULTS 1
#endif

#define NSRC   2
#define NREC   (NSRC*R)
#define ALLCH  3       /* both channels */
#define ALLTASKS 7     /* bit 0, 1: the sources; bit 2: the consumer */
#define KBIT   4
#define QCAP   (2*R+MAXCK+1)
#define bit(n) (1 << (n))
#define below(n) (bit(n) - 1)     /* bits of ids under n */

/* what travels in a channel, one byte per event */
#define TREC(s)    (s)            /* record with sequence number s */
#define TBAR(n)    (16+(n))       /* barrier n */
#define TABAR(n)   (24+(n))       /* barrier n of a checkpoint that aligns in every mode */
#define TCAN(n)    (32+(n))       /* cancel marker n */
#define TEOD       48             /* end of data */
#define isRec(t)   ((t) < 16)
#define isBar(t)   ((t) >= 16 && (t) < 32)
#define isCan(t)   ((t) >= 32 && (t) < 48)
#define tokId(t)   ((t) & 7)

byte mode;                        /* -DMODE=m, or each of them (init) */
#define EO (mode != ATLEAST)      /* exactly-once modes */
#define aligns (mode != ATLEAST)  /* barrier.Aligner.aligns */

typedef Queue { byte e[QCAP]; byte cnt };
typedef Counts { byte r[NREC] };
typedef Snap {
	byte off[NSRC];                  /* source offsets */
	byte outFirst[NSRC]; byte outCnt[NSRC]; /* a source's output channel state */
	byte st[NREC];                   /* consumer state: how often each record counts */
	byte inFirst[NSRC]; byte inCnt[NSRC];   /* consumer input channel state */
	byte txns                        /* sink: transactions pre-committed, not committed */
};

/* ---- the world ---- */
Queue q[NSRC];                 /* channel c: source c to the consumer */
Snap snap[MAXCK+1];            /* what tasks wrote for each checkpoint */
byte durable;                  /* ids whose metadata is durable (storage) */
Counts prep[MAXCK+1];          /* external system: transaction n, pre-committed */
byte prepM;                    /* transactions prepared, neither committed nor aborted */
Counts out;                    /* external system: committed output */
byte faults;
bool jobDone;

/* ---- coordinator (checkpoint.Coordinator and the runtime's driver) ---- */
bool running = 1;
bool finishing;
byte lastID;                   /* survives crashes: ids are reserved in storage */
byte pend, persisting, npend;
byte ackd[MAXCK+1];
byte finalM;                   /* ids triggered with Trigger.Final */
byte finalFrom, exhM, latest;
chan toK = [2*MAXCK] of { byte, byte };   /* coordinator to consumer: kind, id */
#define NOTIFY 1
#define NOTIFYEND 2
#define ABORT 3

/* ---- sources ---- */
byte sent[NSRC];
bool exh[NSRC], sfin[NSRC];

/* ---- consumer: state, aligner (barrier.Aligner), sink ---- */
Counts st;
bool blocked[NSRC];
byte lastDone, overM, trk, tmust, pers;
byte tseen[MAXCK+1], pseen[MAXCK+1];
byte ended;
bool inputEnded, kfin;
byte told;                     /* ids the consumer acknowledged or declined */
Counts open;                   /* sink: the open transaction */
byte ptx;                      /* sink: transactions pre-committed, not committed */

/* scratch of the atomic steps, zero between them (not hidden: pan would
   not restore hidden variables when it backtracks inside an atomic step) */
byte i, j, c2, t, n2, m2, cid, cmust;
inline clean() { i = 0; j = 0; c2 = 0; t = 0; n2 = 0; m2 = 0; cid = 0; cmust = 0 }

/* ---- channels ---- */
inline push(c, tok) {
	assert(q[c].cnt < QCAP);
	q[c].e[q[c].cnt] = tok;
	q[c].cnt++
}

inline pop(c, tok) {
	tok = q[c].e[0];
	for (i : 0 .. QCAP-2) { q[c].e[i] = q[c].e[i+1] }
	q[c].e[QCAP-1] = 0;
	q[c].cnt--
}

/* ---- external system ---- */
inline commit(x) {
	if
	:: prepM & bit(x) ->
		printf("sink: commit transaction %d\n", x);
		for (i : 0 .. NREC-1) {
			out.r[i] = out.r[i] + prep[x].r[i];
			prep[x].r[i] = 0;
			assert(!EO || out.r[i] <= 1)   /* a record committed twice */
		}
		prepM = prepM & ~bit(x)
	:: else -> skip
	fi
}

inline clearSnap(n) {
	for (i : 0 .. NSRC-1) {
		snap[n].off[i] = 0; snap[n].outFirst[i] = 0; snap[n].outCnt[i] = 0;
		snap[n].inFirst[i] = 0; snap[n].inCnt[i] = 0
	}
	for (i : 0 .. NREC-1) { snap[n].st[i] = 0 }
	snap[n].txns = 0
}

/* ---- coordinator ---- */

/* the checkpoint is a consistent cut: on each channel, the records in the
   consumer's snapshot, its input channel state and the source's output
   channel state are exactly those the source had sent at its snapshot */
inline checkCut(n) {
	for (c2 : 0 .. NSRC-1) {
		for (j : 0 .. R-1) {
			t = snap[n].st[c2*R+j];
			if
			:: snap[n].inFirst[c2] <= j && j < snap[n].inFirst[c2] + snap[n].inCnt[c2] -> t++
			:: else -> skip
			fi;
			if
			:: snap[n].outFirst[c2] <= j && j < snap[n].outFirst[c2] + snap[n].outCnt[c2] -> t++
			:: else -> skip
			fi;
			assert(t == (j < snap[n].off[c2] -> 1 : 0))   /* inconsistent cut */
		}
	}
}

inline notify(n, end) {
	printf("coordinator: checkpoint %d complete, notify\n", n);
	if
	:: end -> sfin[0] = 1; sfin[1] = 1; toK!NOTIFYEND,n
	:: else -> toK!NOTIFY,n
	fi
}

/* Coordinator.abort: the tasks release n; sink transactions stay */
inline abort(n) {
	printf("coordinator: abort %d\n", n);
	pend = pend & ~bit(n); persisting = persisting & ~bit(n); npend--;
	ackd[n] = 0;
	clearSnap(n);
	toK!ABORT,n
}

/* Coordinator.Acknowledge */
inline ack(n, who) {
	if
	:: (pend & bit(n)) && !(persisting & bit(n)) ->
		ackd[n] = ackd[n] | who;
		if
		:: ackd[n] == ALLTASKS ->
			printf("coordinator: all acknowledged %d: write its metadata\n", n);
			persisting = persisting | bit(n);   /* Persist */
#ifdef BUG_EAGER
			notify(n, finalFrom != 0 && n >= finalFrom);
#endif
			skip
		:: else -> skip
		fi
	:: else -> skip   /* late: DiscardState */
	fi
}

/* Coordinator.Decline, TriggerFailed */
inline decline(n) {
	if
	:: (pend & bit(n)) && !(persisting & bit(n)) -> abort(n)
	:: else -> skip
	fi
}

/* Coordinator.Persisted(nil): complete, subsume, retain one */
inline complete(n) {
	pend = pend & ~bit(n); persisting = persisting & ~bit(n); npend--;
	ackd[n] = 0;
	if
	:: n < latest ->            /* a newer one completed first: not retained */
		durable = durable & ~bit(n); clearSnap(n)
	:: else ->
		if
		:: latest != 0 -> durable = durable & ~bit(latest); clearSnap(latest)
		:: else -> skip
		fi;
		latest = n;
#ifndef BUG_EAGER
		notify(n, finalFrom != 0 && n >= finalFrom);
#endif
		if
		:: finalFrom != 0 && n >= finalFrom -> finishing = 1
		:: else -> skip
		fi;
		for (m2 : 1 .. n-1) {
			if
			:: (pend & bit(m2)) && !(persisting & bit(m2)) -> abort(m2)
			:: else -> skip
			fi
		}
	fi
}

/* Coordinator.finalUnderway */
#define finalUnderway (((pend >> finalFrom) != 0) || latest >= finalFrom)

/* ---- sources (runtime task.control, ControlTrigger) ---- */

/* Output.Overtake: barrier n goes in front of the records and end of data
   queued after the last barrier or cancel marker; the records it overtakes
   are the source's output channel state */
inline overtake(s, n) {
	j = q[s].cnt;
	do
	:: j > 0 && (isRec(q[s].e[j-1]) || q[s].e[j-1] == TEOD) -> j--
	:: else -> break
	od;
	snap[n].outCnt[s] = 0;
	for (i : j .. q[s].cnt-1) {
		if
		:: isRec(q[s].e[i]) ->
			if
			:: snap[n].outCnt[s] == 0 -> snap[n].outFirst[s] = q[s].e[i]
			:: else -> skip
			fi;
			snap[n].outCnt[s]++
		:: else -> skip
		fi
	}
#ifdef BUG_BARRIER_BEHIND
	push(s, TBAR(n))     /* planted: the barrier stays behind what it captured */
#else
	assert(q[s].cnt < QCAP);
	i = q[s].cnt;
	do
	:: i > j -> q[s].e[i] = q[s].e[i-1]; i--
	:: else -> break
	od;
	q[s].e[j] = TBAR(n);
	q[s].cnt++
#endif
}

inline sourceTrigger(s, n) {
	if
	:: sfin[s] -> skip
	:: !sfin[s] && faults < MAXFAULTS ->   /* its snapshot fails: decline, cancel marker */
		faults++;
		printf("source %d: declines %d, cancel marker\n", s, n);
		push(s, TCAN(n));
		decline(n)
	:: !sfin[s] ->
		snap[n].off[s] = sent[s];
		printf("source %d: snapshot %d at offset %d\n", s, n, sent[s]);
		if
		:: finalM & bit(n) -> push(s, TABAR(n))
		:: else ->
			if
			:: mode == UNALIGNED -> overtake(s, n)
			:: else -> push(s, TBAR(n))
			fi
		fi;
		ack(n, bit(s))
	fi
}

/* ---- the consumer's aligner (barrier.Aligner) ---- */

#define isOver(n) ((n) <= lastDone || (overM & bit(n)))

inline markOver(n) {
	if
	:: !isOver(n) -> overM = overM | bit(n)
	:: else -> skip
	fi
}

inline unblockAll() { blocked[0] = 0; blocked[1] = 0 }

inline kDecline(n) { printf("consumer: declines %d\n", n); told = told | bit(n); decline(n) }

/* the sink's pre-commit and the state's copy: task.snapshot */
inline kSnapshot(n) {
	j = 0;
	for (i : 0 .. NREC-1) {
		snap[n].st[i] = st.r[i];
		prep[n].r[i] = open.r[i];
		j = j + open.r[i];
		open.r[i] = 0
	}
	if
	:: j > 0 ->   /* an empty transaction is not opened (fileSink.Snapshot) */
		prepM = prepM | bit(n);
		ptx = ptx | bit(n);
		printf("consumer: snapshot %d; the sink pre-commits transaction %d\n", n, n)
	:: else -> printf("consumer: snapshot %d\n", n)
	fi;
	snap[n].txns = ptx
}

inline kAck(n) { told = told | bit(n); ack(n, KBIT) }

inline stopPersisting(n) {
	pers = pers & ~bit(n); pseen[n] = 0;
	for (i : 0 .. NSRC-1) { snap[n].inFirst[i] = 0; snap[n].inCnt[i] = 0 }
}

inline setDone(n) {
	lastDone = n;
	overM = overM & ~(bit(n+1) - 1)
}

inline snapshotUnaligned(n, seen) {
	setDone(n);
	kSnapshot(n);
	if
	:: seen == ALLCH -> kAck(n)          /* ChannelStateComplete */
	:: else -> pers = pers | bit(n); pseen[n] = seen;  /* PersistInput */
		printf("consumer: unaligned snapshot %d; persists the channels without its barrier\n", n)
	fi
}

inline untrack(n) { trk = trk & ~bit(n); tseen[n] = 0; tmust = tmust & ~bit(n) }

/* Aligner.passed */
inline passed(c, n) {
	for (n2 : 1 .. n-1) {
		if
		:: (pers & bit(n2)) && !(pseen[n2] & bit(c)) -> stopPersisting(n2); kDecline(n2)
		:: else -> skip
		fi;
		if
		:: (trk & bit(n2)) && !(tseen[n2] & bit(c)) ->
			untrack(n2); markOver(n2); kDecline(n2);
			if :: aligns -> unblockAll() :: else -> skip fi
		:: else -> skip
		fi
	}
}

/* Aligner.finishComplete */
inline finishComplete() {
	n2 = MAXCK;
	do
	:: n2 == 0 -> break
	:: n2 > 0 && (trk & bit(n2)) && tseen[n2] == ALLCH ->
		for (m2 : 1 .. n2-1) {
			if :: trk & bit(m2) -> untrack(m2); kDecline(m2) :: else -> skip fi
		}
		untrack(n2);
		setDone(n2);
		kSnapshot(n2);
		kAck(n2);
#ifndef BUG_STAYS_BLOCKED
		unblockAll();
#endif
		break
	:: else -> n2--
	od
}

#define minTracked(n) ((trk & below(n)) == 0)   /* no tracked id under n */

/* Aligner.onBarrier */
inline onBarrier(c, n, must) {
#ifdef BUG_FORWARD
	if                          /* planted: snapshot on the first barrier, never block */
	:: n > lastDone -> lastDone = n; kSnapshot(n); kAck(n)
	:: else -> skip
	fi
#else
	passed(c, n);
	if
	:: pers & bit(n) ->                      /* arrived */
		pseen[n] = pseen[n] | bit(c);
		if
		:: pseen[n] == ALLCH -> pers = pers & ~bit(n); pseen[n] = 0; kAck(n)
		:: else -> skip
		fi
	:: else ->
		if
		:: isOver(n) -> skip
		:: aligns && trk != 0 && minTracked(n) && !(trk & bit(n)) -> markOver(n)   /* obsolete */
		:: else ->
			if
			:: mode == UNALIGNED && !must && !(trk & bit(n)) -> snapshotUnaligned(n, bit(c))
			:: else ->
				trk = trk | bit(n);
				if :: must -> tmust = tmust | bit(n) :: else -> skip fi;
				if
				:: !(tseen[n] & bit(c)) ->
					tseen[n] = tseen[n] | bit(c);
					if
					:: aligns && tseen[n] != ALLCH -> blocked[c] = 1; printf("consumer: blocks channel %d\n", c)
					:: else -> skip
					fi;
					finishComplete()
				:: else -> skip
				fi
			fi
		fi
	fi
#endif
}

/* Aligner.drop */
inline drop(n) {
	if
	:: trk & bit(n) -> untrack(n); unblockAll()
	:: else -> skip
	fi
}

/* Aligner.OnCancel: the source declined n; the marker is forwarded (no outputs here) */
inline onCancel(c, n) {
#ifndef BUG_FORWARD
	passed(c, n);
	if
	:: pers & bit(n) -> stopPersisting(n)
	:: else ->
		if
		:: isOver(n) -> skip
		:: else -> drop(n); markOver(n)
		fi
	fi
#else
	skip
#endif
}

/* Aligner.Abort */
inline onAbort(n) {
#ifndef BUG_FORWARD
#ifdef BUG_ABORT_DROPS_OLDER
	for (n2 : 1 .. n-1) {       /* planted: older alignments are dropped too */
		if :: trk & bit(n2) -> drop(n2); markOver(n2) :: else -> skip fi
	}
#endif
	if
	:: pers & bit(n) -> stopPersisting(n)
	:: else ->
		if
		:: isOver(n) -> skip
		:: else -> drop(n); markOver(n)
		fi
	fi
#else
	skip
#endif
}

/* no alignment or persistence ends silently: a checkpoint the coordinator
   waits for is one the consumer has not finished with, or has told it of */
inline checkTold() {
	for (n2 : 1 .. MAXCK) {
		assert(!((pend & bit(n2)) && !(persisting & bit(n2)) && isOver(n2) && !(pers & bit(n2)) && !(told & bit(n2))))   /* an alignment ends silently */
	}
}

/* the end of the job: exactly once (at least once), nothing left open */
inline checkEnd() {
	for (i : 0 .. NREC-1) {
		assert(!EO || st.r[i] == 1 && out.r[i] == 1)   /* not exactly once */
		assert(EO || st.r[i] >= 1 && out.r[i] >= 1)    /* not at least once */
	}
	assert(prepM == 0)   /* a transaction stays open */
}

/* ---- failover: a process crash; restore the newest durable checkpoint ---- */
inline restore() {
	/* the newest durable checkpoint */
	n2 = 0;
	for (i : 1 .. MAXCK) { if :: durable & bit(i) -> n2 = i :: else -> skip fi }
	for (j : 1 .. MAXCK) { if :: j != n2 -> clearSnap(j) :: else -> skip fi }
	durable = (n2 > 0 -> bit(n2) : 0);
	printf("failover: restore checkpoint %d (0: none)\n", n2);
	/* coordinator: New from storage, Start */
	pend = 0; persisting = 0; npend = 0; finalM = 0; finalFrom = 0; exhM = 0; finishing = 0;
	latest = n2;
	for (i : 1 .. MAXCK) { ackd[i] = 0; tseen[i] = 0; pseen[i] = 0 }
	do :: nempty(toK) -> toK?_,_ :: empty(toK) -> break od;
	/* tasks */
	for (c2 : 0 .. NSRC-1) {
		for (i : 0 .. QCAP-1) { q[c2].e[i] = 0 }
		q[c2].cnt = 0;
		sent[c2] = snap[n2].off[c2]; exh[c2] = 0; sfin[c2] = 0; blocked[c2] = 0;
		/* channel state first: the consumer's input state, then the source's output state */
		for (i : 0 .. snap[n2].inCnt[c2]) {
			if :: i < snap[n2].inCnt[c2] -> push(c2, TREC(snap[n2].inFirst[c2] + i)) :: else -> skip fi
		}
		for (i : 0 .. snap[n2].outCnt[c2]) {
			if :: i < snap[n2].outCnt[c2] -> push(c2, TREC(snap[n2].outFirst[c2] + i)) :: else -> skip fi
		}
	}
	for (i : 0 .. NREC-1) { st.r[i] = snap[n2].st[i]; open.r[i] = 0 }
	lastDone = 0; overM = 0; trk = 0; tmust = 0; pers = 0;
	ended = 0; inputEnded = 0; kfin = 0; told = 0;
	/* the sink commits the transactions its snapshot recorded, aborts the others */
	for (t : 1 .. MAXCK) {
		if :: snap[n2].txns & bit(t) -> commit(t) :: else -> skip fi
	}
	for (t : 1 .. MAXCK) { for (i : 0 .. NREC-1) { prep[t].r[i] = 0 } }
	prepM = 0;
	ptx = 0
}

/* ---- processes ---- */

active proctype coordinator() {
end:	do
	:: atomic {   /* Tick: a periodic trigger is due, or the final one */
		running && !finishing && npend < MAXCONC && lastID < MAXCK &&
		(finalFrom != 0 || lastID < MAXCK-1) ->
		lastID++;
		printf("coordinator: trigger %d\n", lastID);
#ifdef BUG_FINAL_FLAG_ONCE
		if :: finalFrom != 0 && !finalUnderway -> finalM = finalM | bit(lastID) :: else -> skip fi;
#else
		if :: finalFrom != 0 -> finalM = finalM | bit(lastID) :: else -> skip fi;
#endif
		pend = pend | bit(lastID); npend++;
		for (c2 : 0 .. NSRC-1) { sourceTrigger(c2, lastID) };
		clean()
	   }
	:: atomic {   /* a metadata write ends: durable, or failed */
		persisting != 0 ->
		n2 = 1;
		do
		:: (persisting >> (n2+1)) != 0 -> n2++
		:: persisting & bit(n2) -> break
		od;
		if :: EO -> checkCut(n2) :: else -> skip fi;   /* as the sim does at Persist */
		if
		:: true -> durable = durable | bit(n2); printf("storage: metadata of %d durable\n", n2); complete(n2)
		:: faults < MAXFAULTS -> faults++; printf("storage: the metadata write of %d fails\n", n2); abort(n2)
		fi;
		clean()
	   }
	:: atomic {   /* a checkpoint expires (Tick after the timeout) */
		faults < MAXFAULTS && (pend & ~persisting) != 0 ->
		faults++;
		printf("coordinator: a checkpoint expires\n");
		n2 = 1;
		do
		:: ((pend & ~persisting) >> (n2+1)) != 0 -> n2++
		:: (pend & ~persisting) & bit(n2) -> break
		od;
		abort(n2);
		clean()
	   }
	:: atomic {   /* the process crashes: writes in flight land or not; fail over */
		faults < MAXFAULTS && !jobDone ->
		faults++;
		printf("CRASH: the process dies\n");
		for (n2 : 1 .. MAXCK) {
			if
			:: persisting & bit(n2) -> durable = durable | bit(n2); printf("storage: metadata of %d durable\n", n2)
			:: true -> skip
			fi
		}
		restore();
		clean()
	   }
	od
}

proctype source(byte s) {
end:	do
	:: d_step { sent[s] < R -> printf("source %d: record %d\n", s, sent[s]); push(s, TREC(sent[s])); sent[s]++; clean() }
	:: d_step {   /* input exhausted: end of data, InputExhausted */
		sent[s] == R && !exh[s] ->
		push(s, TEOD);
		printf("source %d: end of data\n", s);
		exh[s] = 1;
		exhM = exhM | bit(s);
		if :: exhM == 3 && finalFrom == 0 -> finalFrom = lastID + 1 :: else -> skip fi;
		clean()
	   }
	od
}

inline consume(c) {
	pop(c, t);
	if
	:: isRec(t) ->
		printf("consumer: record %d of channel %d\n", t, c);
		st.r[c*R+t]++;
		open.r[c*R+t]++;
		for (n2 : 1 .. MAXCK) {     /* persisted as input channel state */
			if
			:: (pers & bit(n2)) && !(pseen[n2] & bit(c)) ->
				if :: snap[n2].inCnt[c] == 0 -> snap[n2].inFirst[c] = t :: else -> skip fi;
				snap[n2].inCnt[c]++
			:: else -> skip
			fi
		}
	:: isBar(t) -> cid = tokId(t); cmust = (t >= 24);
		printf("consumer: barrier %d on channel %d\n", cid, c);
		onBarrier(c, cid, cmust)
	:: isCan(t) -> cid = tokId(t);
		printf("consumer: cancel marker %d on channel %d\n", cid, c);
		onCancel(c, cid)
	:: t == TEOD ->
		printf("consumer: end of data on channel %d\n", c);
		ended = ended | bit(c);
		if :: ended == ALLCH -> inputEnded = 1 :: else -> skip fi
	fi;
	checkTold()
}

/* the consumer task reads its channels (task.runInputs) */
proctype reader(byte c) {
end:	do
	:: d_step { !kfin && !blocked[c] && q[c].cnt > 0 -> consume(c); clean() }
	od
}

/* the consumer task hears the coordinator (task.control) and its clock */
active proctype consumer() {
	byte kind, id;
end:	do
	:: d_step {   /* the coordinator's notification or abort (task.control) */
		toK?kind,id ->
		if
		:: kfin -> skip
		:: kind == ABORT -> printf("consumer: hears abort %d\n", id); onAbort(id); checkTold()
		:: else ->          /* NotifyComplete: the sink commits up to id */
			printf("consumer: hears %d complete (kind %d: 2 ends the job)\n", id, kind);
			for (t : 1 .. id) {
				if :: ptx & bit(t) -> commit(t); ptx = ptx & ~bit(t) :: else -> skip fi
			}
			if
			:: kind == NOTIFYEND ->
				assert(inputEnded);   /* told to end before its input ended */
				kfin = 1;
				jobDone = 1;
				checkEnd()
			:: else -> skip
			fi
		fi;
		id = 0; kind = 0;
		skip;
		clean()
	   }
	:: d_step {   /* Tick past the aligned-checkpoint timeout: switch to unaligned */
		mode == TIMEOUT && !kfin && trk != 0 && !(trk & tmust) ->
		n2 = 1;
		do :: !(trk & bit(n2)) -> n2++ :: else -> break od;
		m2 = tseen[n2];
		printf("consumer: the aligned timeout switches %d to unaligned\n", n2);
		untrack(n2);
		snapshotUnaligned(n2, m2);
		unblockAll();
		checkTold();
		skip;
		clean()
	   }
	od
}

init {
	atomic {
#ifdef MODE
		mode = MODE;
#else
		if :: mode = ALIGNED :: mode = ATLEAST :: mode = UNALIGNED :: mode = TIMEOUT fi;
#endif
		run source(0); run source(1); run reader(0); run reader(1)
	}
}

ltl done { <> jobDone }
