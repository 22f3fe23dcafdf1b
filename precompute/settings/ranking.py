"""The ranking's settings: candidate sources and training."""

from __future__ import annotations

import dataclasses

from .environment import setting

#: How training labels examples (``PREFEED_TRAIN_LABELS``) and the CatBoost objectives it can use (``_LOSS``: one
#: of them, or ``auto``, every one fitted and the better on validation kept: ``learning/objective.py``).
TRAIN_LABELS, TRAIN_LOSSES = ("steps", "period"), ("Logloss", "YetiRank")


@dataclasses.dataclass(frozen=True)
class RankingSettings:
    # -- candidates ----------------------------------------------------------------------------------------
    covisit_recent_items: int = setting(20, "PREFEED_COVISIT_RECENT_ITEMS", "most recent distinct items whose "
                                        "co-visited neighbours become candidates", unit="items")
    covisit_neighbours: int = setting(50, "PREFEED_COVISIT_NEIGHBOURS", "neighbours kept per item (training)",
                                      unit="items")
    covisit_window: int = setting(5, "PREFEED_COVISIT_WINDOW", "events apart that count as co-visited", unit="events")
    session_gap: int = setting(1800, "PREFEED_SESSION_GAP", "a longer gap between events starts a session", unit="s")
    recency_decay: float = setting(0.85, "PREFEED_RECENCY_DECAY", "weight of the k-th most recent item's neighbours "
                                   "is decay^k", minimum=0.0, maximum=1.0)
    user_top_categories: int = setting(3, "PREFEED_USER_TOP_CATEGORIES", "a user's strongest categories, whose "
                                       "popular items are candidates", unit="categories")
    category_popular: int = setting(1200, "PREFEED_CATEGORY_POPULAR", "popular items of each of them", unit="items")
    knn_neighbours: int = setting(50, "PREFEED_KNN_NEIGHBOURS", "most similar items kept per item", unit="items")
    similar_length: int = setting(20, "PREFEED_SIMILAR_LENGTH", "similar items kept per item in "
                                  "Redis (`GET /items/<id>/similar`: its largest `limit`)", unit="items", minimum=1,
                                  maximum=255)
    knn_candidates: int = setting(300, "PREFEED_KNN_CANDIDATES", "the items most similar to a user's history added "
                                  "to their candidates (0: none)", unit="items", minimum=0)
    latent_factors: int = setting(64, "PREFEED_LATENT_FACTORS", "dimensions of the latent model (PureSVD of who "
                                  "interacted with what) fitted at training (0: no latent model)", minimum=0)
    latent_candidates: int = setting(100, "PREFEED_LATENT_CANDIDATES", "the latent model's best items for a "
                                     "user's history added to their candidates (0: none)", unit="items", minimum=0)
    recent_popular_1h: int = setting(50, "PREFEED_RECENT_POPULAR_1H", "the hour's most popular items added to "
                                     "every user's candidates (0: none)", unit="items", minimum=0)
    recent_popular_1d: int = setting(200, "PREFEED_RECENT_POPULAR_1D", "the day's most popular items added to "
                                     "every user's candidates (0: none)", unit="items", minimum=0)
    global_popular: int = setting(1000, "PREFEED_GLOBAL_POPULAR", "globally popular items added to every user's "
                                  "candidates", unit="items")

    rank_shown: bool = setting(False, "PREFEED_RANK_SHOWN", "rank with what each user was shown: the pages that "
                               "showed an item to the user, when, at which place, and whether they acted on it "
                               "since, and how often they were shown the item's category and took what it showed "
                               "(columns learned by `train`, from the pages stored where there are any; a bundle "
                               "trained with the other value is refused)")

    cascade_keep: int = setting(200, "PREFEED_CASCADE_KEEP", "candidates per user the full model scores, the best "
                                "by a small first stage trained with it (`train`); the rest keep the first stage's "
                                "order below them (0: no first stage, the full model scores every candidate)",
                                unit="items", minimum=0)

    # -- training ------------------------------------------------------------------------------------------
    train_iterations: int = setting(1000, "PREFEED_TRAIN_ITERATIONS", "most CatBoost trees; early stopping "
                                    "chooses the count (`train --iterations`)", unit="trees")
    train_depth: int = setting(6, "PREFEED_TRAIN_DEPTH", "tree depth (`train --depth`)", maximum=16)
    train_learning_rate: float = setting(0.05, "PREFEED_TRAIN_LEARNING_RATE", "CatBoost learning rate",
                                         minimum=1e-6, maximum=1.0)
    train_users: int = setting(3000, "PREFEED_TRAIN_USERS", "users sampled for training and validation",
                               unit="users")
    train_negatives: int = setting(100, "PREFEED_TRAIN_NEGATIVES", "negatives sampled per training user (labels "
                                   "`period`) or a third of it per replayed step (`steps`)", unit="items")
    train_labels: str = setting("steps", "PREFEED_TRAIN_LABELS", "`steps`: label each of a user's first replayed "
                                "steps after a cut by its new items, history and popularity as of the step (what "
                                "the replay protocol judges); `period`: history frozen at the cut, labels up to "
                                "the validation cut")
    replay_steps: int = setting(10, "PREFEED_REPLAY_STEPS", "steps per user after a cut that training labels and "
                                "promotion replays (a step: one user's events at one time)", unit="steps")
    train_cut_quantile: float = setting(0.7, "PREFEED_TRAIN_CUT_QUANTILE", "the last training cut (share of events "
                                        "before it)", minimum=0.01, maximum=0.99)
    train_valid_quantile: float = setting(0.8, "PREFEED_TRAIN_VALID_QUANTILE", "the validation cut (above the "
                                          "training cut): early stopping and promotion judge after it",
                                          minimum=0.01, maximum=0.99)
    train_periods: int = setting(5, "PREFEED_TRAIN_PERIODS", "training cuts, the last at the training cut and each "
                                 "earlier one the validation cut's distance before the next; each labelled up to the "
                                 "validation cut", unit="periods")
    train_loss: str = setting("auto", "PREFEED_TRAIN_LOSS", "CatBoost objective: `Logloss` (pointwise, each "
                              "positive weighted by its grade), `YetiRank` (pairwise, within each group), or `auto`: "
                              "both fitted, and Logloss kept unless YetiRank ranks the validation period's whole "
                              "candidate lists better with confidence")
    train_early_stopping: int = setting(200, "PREFEED_TRAIN_EARLY_STOPPING", "training stops once validation "
                                        "NDCG@10 has not improved for this many trees and keeps the best count (0: "
                                        "no early stopping, every tree is kept)", unit="trees", minimum=0)
