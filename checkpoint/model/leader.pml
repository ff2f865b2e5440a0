/*
 * leader.pml: Weir's checkpoint coordinator under high availability, for
 * SPIN: terms of the job's leadership on etcd, each with its epoch, a
 * coordinator and its deployment, and a deposed leader that acts on,
 * unaware, beside its successor.
 *
 * Each term's deployment is one task: a source chained to a
 * two-phase-commit sink, reading R records of an input it can rewind (a
 * file, a Kafka partition). A checkpoint's trigger, the task's snapshot
 * (its offset; the sink pre-commits the open transaction) and its
 * acknowledgement are one step here: alignment and channel state are
 * dataflow.pml's. What is modelled: etcd's leader key (its revision is the
 * epoch), the checkpoint-id counter and the completion records, each write
 * fenced by the writer's epoch (internal/ha); metadata written to shared
 * storage before its record (storage.Led.Commit: the record is the commit
 * point); a new leader restoring the newest checkpoint etcd records, its
 * sink committing the transactions of that snapshot and aborting every
 * other; up to MAXTERMS-1 leader changes, each deposed leader acting on
 * until it notices (any moment, or when etcd refuses one of its writes).
 *
 * Safety (assertions): no checkpoint completes under a deposed leader (a
 * completion etcd records is the current leader's); a committed record is
 * never committed twice; when the job has ended and every deposed leader
 * has stopped, every record is committed exactly once and no transaction
 * is left open.
 * Liveness (ltl done, with -DMAXTERMS=1): the job ends.
 *
 * Planted bug: -DBUG_COMPLETE_DEPOSED (etcd records a deposed leader's
 * completion: Complete is not fenced by the epoch). -DOUTPUT_ONLY leaves out
 * the assertion on completions, to show the output's check alone finds it.
 */

#ifndef R
#define R 2            /* records of the input */
#endif
#ifndef MAXID
#define MAXID 3        /* checkpoint ids 1..MAXID */
#endif
#ifndef MAXCONC
#define MAXCONC 2
#endif
#ifndef MAXTERMS
#define MAXTERMS 2     /* terms: MAXTERMS-1 leader changes */
#endif

#define bit(n) (1 << (n))

typedef Counts { byte r[R] };

/* ---- etcd ---- */
byte leader = 1;               /* the leader key's epoch */
byte etcdLast;                 /* checkpoint-id counter */
byte recorded;                 /* ids recorded as completed */

/* ---- checkpoint storage (shared by every term) ---- */
byte metaM;                    /* ids whose metadata was written */
byte snapOff[MAXID+1];         /* the task's offset in checkpoint n */
byte snapTx[MAXID+1];          /* its sink's pre-committed transactions */

/* ---- the external system ---- */
Counts prep[MAXID+1];
byte prepM;
Counts out;

/* ---- terms: coordinator and task ---- */
bool acting[4];                      /* its coordinator and task act */
byte lastID[MAXTERMS+1];
byte pend[MAXTERMS+1];         /* triggered, acknowledged, metadata not written */
byte wrote[MAXTERMS+1];        /* metadata written, not recorded */
byte inflight[MAXTERMS+1];     /* checkpoints pending: Config.MaxConcurrent bounds them */
byte notice[MAXTERMS+1];       /* notifications to the task: ids */
bool noticeEnd[MAXTERMS+1];
byte off[MAXTERMS+1];          /* the task's offset */
Counts open[MAXTERMS+1];       /* its sink's open transaction */
byte ptx[MAXTERMS+1];          /* its sink's pre-committed transactions */
bool ended[MAXTERMS+1];        /* its job ended (final checkpoint completed) */
bool jobDone;

/* scratch of the atomic steps, zero between them (not hidden: pan would
   not restore hidden variables when it backtracks inside an atomic step) */
byte i, n, x;
inline clean() { i = 0; n = 0; x = 0 }

inline commit(tx) {
	if
	:: prepM & bit(tx) ->
		printf("sink: commit transaction %d\n", tx);
		for (i : 0 .. R-1) {
			out.r[i] = out.r[i] + prep[tx].r[i];
			prep[tx].r[i] = 0;
			assert(out.r[i] <= 1)       /* a record committed twice */
		}
		prepM = prepM & ~bit(tx)
	:: else -> skip
	fi
}

/* a new term: campaign, scan what etcd records, deploy, recover the sink */
inline lead(term) {
	leader = term;
	acting[term] = 1;
	lastID[term] = etcdLast;
	n = 0;
	for (i : 1 .. MAXID) { if :: recorded & bit(i) -> n = i :: else -> skip fi }
	off[term] = snapOff[n];
	for (x : 1 .. MAXID) { if :: snapTx[n] & bit(x) -> commit(x) :: else -> skip fi }
	for (x : 1 .. MAXID) { for (i : 0 .. R-1) { prep[x].r[i] = 0 } }
	prepM = 0;
	printf("term %d leads: restores checkpoint %d (0: none), aborts every other transaction\n", term, n)
}

inline retire(term) {
	printf("term %d stops\n", term);
	acting[term] = 0; pend[term] = 0; wrote[term] = 0; inflight[term] = 0; notice[term] = 0; noticeEnd[term] = 0;
	ptx[term] = 0;
	for (i : 0 .. R-1) { open[term].r[i] = 0 }
}

proctype term(byte me) {
end:	do
	:: atomic {   /* the task reads a record; its sink writes it to the open transaction */
		acting[me] && !ended[me] && off[me] < R ->
		printf("term %d: task reads record %d\n", me, off[me]);
		open[me].r[off[me]]++;
		off[me]++;
		clean()
	   }
	:: atomic {   /* trigger: reserve the id in etcd, snapshot, acknowledge */
		acting[me] && !ended[me] && inflight[me] < MAXCONC && lastID[me] < MAXID &&
		(lastID[me] < MAXID-1 || off[me] == R) ->    /* the last id is kept for the final checkpoint */
		lastID[me]++;
		n = lastID[me];
		if
		:: me == leader && n > etcdLast ->     /* Leadership.Reserve */
			etcdLast = n;
			printf("term %d: trigger %d; snapshot at offset %d; the sink pre-commits what it wrote since\n", me, n, off[me]);
			snapOff[n] = off[me];
			x = 0;
			for (i : 0 .. R-1) { prep[n].r[i] = open[me].r[i]; x = x + open[me].r[i]; open[me].r[i] = 0 }
			if
			:: x > 0 ->   /* an empty transaction is not opened (fileSink.Snapshot) */
				prepM = prepM | bit(n);
				ptx[me] = ptx[me] | bit(n)
			:: else -> skip
			fi;
			snapTx[n] = ptx[me];
			pend[me] = pend[me] | bit(n);
			inflight[me]++
		:: else ->                             /* refused: the term ends at once */
			printf("term %d: etcd refuses to reserve %d\n", me, n);
			retire(me)
		fi;
		clean()
	   }
	:: atomic {   /* every task acknowledged: write the metadata (unfenced) */
		acting[me] && pend[me] != 0 ->
		n = 1;
		do
		:: (pend[me] >> (n+1)) != 0 -> n++
		:: pend[me] & bit(n) -> break
		od;
		metaM = metaM | bit(n);
		printf("term %d: metadata of %d written\n", me, n);
		pend[me] = pend[me] & ~bit(n);
		wrote[me] = wrote[me] | bit(n);
		clean()
	   }
	:: atomic {   /* the commit point: record the completion in etcd (Leadership.Complete) */
		acting[me] && wrote[me] != 0 ->
		n = 1;
		do
		:: (wrote[me] >> (n+1)) != 0 -> n++
		:: wrote[me] & bit(n) -> break
		od;
		wrote[me] = wrote[me] & ~bit(n);
		inflight[me]--;
#ifdef BUG_COMPLETE_DEPOSED
		if :: true
#else
		if :: me == leader
#endif
		   ->
#ifndef OUTPUT_ONLY
			assert(me == leader);   /* a checkpoint completes under a deposed leader */
#endif
			printf("term %d: etcd records %d completed\n", me, n);
			recorded = recorded | bit(n);
			notice[me] = notice[me] | bit(n);     /* NotifyComplete */
			if :: snapOff[n] == R -> noticeEnd[me] = 1 :: else -> skip fi
		:: else -> printf("term %d: etcd refuses to record %d\n", me, n); retire(me)   /* ErrLeaseLost */
		fi;
		clean()
	   }
	:: atomic {   /* the task hears of completions: the sink commits up to the newest */
		acting[me] && notice[me] != 0 ->
		n = 1;
		do
		:: (notice[me] >> (n+1)) != 0 -> n++
		:: else -> break
		od;
		printf("term %d: task hears %d complete\n", me, n);
		for (x : 1 .. n) { if :: ptx[me] & bit(x) -> commit(x); ptx[me] = ptx[me] & ~bit(x) :: else -> skip fi }
		notice[me] = 0;
		if
		:: noticeEnd[me] -> ended[me] = 1; noticeEnd[me] = 0;
			if :: me == leader -> jobDone = 1 :: else -> skip fi
		:: else -> skip
		fi;
		clean()
	   }
	:: atomic {   /* the leader's lease lapses: a standby campaigns and leads */
		me == leader && me < MAXTERMS && !jobDone ->
		printf("LEADER CHANGE: the lease of term %d lapses\n", me);
		run term(me+1);
		lead(me+1);
		clean()
	   }
	:: atomic {   /* a deposed leader notices, or its process dies */
		acting[me] && me != leader -> retire(me);
		clean()
	   }
	:: atomic {   /* the job is over and no deposed leader acts on: check the output */
		jobDone && me == leader && (leader == 1 || !acting[1]) && (leader <= 2 || !acting[2]) ->
		for (i : 0 .. R-1) { assert(out.r[i] == 1) }   /* not exactly once */
		assert(prepM == 0);   /* a transaction stays open */
		clean();
		break
	   }
	od
}

init {
	atomic { acting[1] = 1; run term(1) }
}

ltl done { <> jobDone }
