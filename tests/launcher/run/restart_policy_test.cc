// decide_restart (run/restart_policy.h): after a failed round, in its order.
#include "run/restart_policy.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <string>

namespace ddprun {
namespace {

// A round whose one worker exited with `code` first.
RoundResult failed_round(int code) {
  RoundResult result;
  RankResult rank;
  rank.started = true;
  rank.exited = true;
  rank.wait_status = code << 8;
  result.ranks.push_back(rank);
  result.first_failure = 0;
  result.outcome = Outcome::kWorkerFailed;
  return result;
}

RestartQuestion with_restarts_left() {
  RestartQuestion question;
  question.rule.any = true;
  question.max_restarts = 3;
  question.round = 1;
  question.restarts_used = 1;
  question.round_code = 1;
  question.failure = "rank 0 exit 1";
  return question;
}

using Answer = RestartDecision::Answer;

TEST(DecideRestart, RestartsWhileRestartsAreLeftAndCountsThisOne) {
  const RestartDecision decision = decide_restart(failed_round(1), with_restarts_left());
  EXPECT_EQ(decision.answer, Answer::kRestart);
  EXPECT_EQ(decision.why, "restart 2 of 3");
}

TEST(DecideRestart, ANoticeDuringTheRoundEndsItForARerunBeforeAnythingElse) {
  RoundResult result = failed_round(1);
  result.notice = SIGUSR1;
  result.stop_signal = SIGTERM;
  const RestartDecision decision = decide_restart(result, with_restarts_left());
  EXPECT_EQ(decision.answer, Answer::kEndPreempted);
  EXPECT_NE(decision.why.find("SIGUSR1"), std::string::npos) << decision.why;
  RestartQuestion agent = with_restarts_left();
  agent.agent = true;  // an agent's round: its head decides, the notice too
  EXPECT_EQ(decide_restart(result, agent).answer, Answer::kEnd);
}

TEST(DecideRestart, AStopAfterTheFailureKeepsTheFailuresCode) {
  RoundResult result = failed_round(3);
  result.stop_signal = SIGTERM;
  RestartQuestion question = with_restarts_left();
  question.round_code = 3;
  const RestartDecision decision = decide_restart(result, question);
  EXPECT_EQ(decision.answer, Answer::kEnd);
  EXPECT_TRUE(decision.tell);
  EXPECT_NE(decision.why.find("exit 3, the failure's"), std::string::npos) << decision.why;
  result.lost_head = true;
  EXPECT_NE(decide_restart(result, question).why.find("head ddprun"), std::string::npos);
}

TEST(DecideRestart, NoRestartLeftOrNoneAskedForEndsQuietly) {
  RestartQuestion question = with_restarts_left();
  question.restarts_used = 3;
  RestartDecision decision = decide_restart(failed_round(1), question);
  EXPECT_EQ(decision.answer, Answer::kEnd);
  EXPECT_FALSE(decision.tell);
  EXPECT_EQ(decision.why, "no restart left (--max-restarts 3)");
  question.max_restarts = 0;
  question.restarts_used = 0;
  decision = decide_restart(failed_round(1), question);
  EXPECT_EQ(decision.why, "no restart asked for (--max-restarts 0)");
}

TEST(DecideRestart, RestartOnThatDoesNotCoverTheFailureEnds) {
  RestartQuestion question = with_restarts_left();
  question.rule.any = false;
  question.rule.exit_codes = {42};
  RestartDecision decision = decide_restart(failed_round(1), question);
  EXPECT_EQ(decision.answer, Answer::kEnd);
  EXPECT_TRUE(decision.tell);
  EXPECT_EQ(decide_restart(failed_round(42), question).answer, Answer::kRestart);
}

TEST(DecideRestart, TheSameFailureWithoutProgressEndsUnlessRepeatsAreAllowed) {
  RestartQuestion question = with_restarts_left();
  question.last_failure = question.failure;
  RestartDecision decision = decide_restart(failed_round(1), question);
  EXPECT_EQ(decision.answer, Answer::kEnd);
  EXPECT_NE(decision.why.find("round 1 failed as the one before it did"), std::string::npos);
  question.progressed = true;  // a newer step: worth another try
  EXPECT_EQ(decide_restart(failed_round(1), question).answer, Answer::kRestart);
  question.progressed = false;
  question.rule.allow_repeats = true;
  EXPECT_EQ(decide_restart(failed_round(1), question).answer, Answer::kRestart);
}

}  // namespace
}  // namespace ddprun
